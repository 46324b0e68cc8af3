// normalizers.h: the tokenizer.json "normalizer" components: NFC/NFD/NFKC/NFKD (utf8proc),
// Lowercase, Prepend, Replace, Strip and Sequence. Offsets are not tracked (we never return them).
// Does not own added-token matching (added_tokens.h) or splitting (pre_tokenizers.h).
#pragma once
#include <memory>
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace tpshard {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  /// Rewrite s (valid UTF-8) in place.
  virtual void normalize(std::string& s) const = 0;
};

/// Build from the JSON object (null -> nullptr). Throws Error "unsupported normalizer type 'X'".
std::unique_ptr<Normalizer> make_normalizer(const nlohmann::json& j);

}  // namespace tpshard
