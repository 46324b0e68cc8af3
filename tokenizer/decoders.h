// decoders.h: the tokenizer.json "decoder" components: ByteLevel, Replace, ByteFallback, Fuse,
// Strip, Metaspace and Sequence, with HF tokenizers' decode_chain semantics (each works on the
// list of token strings and returns a new list; the final text is their concatenation).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace tpshard {

class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual void decode_chain(std::vector<std::string>& tokens) const = 0;
};

/// Build from the JSON object (null -> nullptr: tokens are concatenated as they are).
/// Throws Error "unsupported decoder type 'X'".
std::unique_ptr<Decoder> make_decoder(const nlohmann::json& j);

}  // namespace tpshard
