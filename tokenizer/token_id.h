// token_id.h: reading a token id from a tokenizer file. Ids index tables sized by the largest id, so a
// crafted id must be refused, not allocated for; a float or out-of-range number must not be cast.
#pragma once
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "format/error.h"

namespace tpshard {

/// The largest token id a tokenizer file may use: 2^22 - 1 (4M), 16 x the largest published vocabularies
/// (about 256K). The id -> token table of the largest id allowed is then at most 128 MiB.
constexpr int64_t kMaxTokenId = (int64_t{1} << 22) - 1;

/// v as a token id: a JSON integer in [0, kMaxTokenId]. Throws Error naming `where` (file and field)
/// for anything else (a float, a string, a negative or too large number).
inline int32_t json_token_id(const nlohmann::json& v, const std::string& where) {
  const bool integer = v.is_number_integer();
  const int64_t id = !integer ? -1 : v.is_number_unsigned() ? (v.get<uint64_t>() > uint64_t(kMaxTokenId) ? -1 : v.get<int64_t>())
                                                             : v.get<int64_t>();
  if (!integer || id < 0 || id > kMaxTokenId)
    throw Error(where + ": token id " + v.dump() + " is not an integer in 0.." + std::to_string(kMaxTokenId),
                "the tokenizer file is corrupt or not a Hugging Face tokenizer; restore it from the model");
  return static_cast<int32_t>(id);
}

}  // namespace tpshard
