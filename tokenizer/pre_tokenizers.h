// pre_tokenizers.h: the tokenizer.json "pre_tokenizer" components: ByteLevel (GPT-2 split regex),
// Split (Regex or String pattern, all five behaviours, invert), Digits, Metaspace, Whitespace,
// WhitespaceSplit and Sequence. Pieces are raw UTF-8; the byte-level alphabet mapping is not done
// here: the BPE model works on raw bytes instead (see bpe.h BpeOptions::byte_level).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace tpshard {

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  /// Split every piece of `pieces` further, in place. at_start: pieces[0] begins at offset 0 of
  /// the user's text (matters for Metaspace prepend_scheme "first").
  virtual void split(std::vector<std::string>& pieces, bool at_start) const = 0;
  /// True when a ByteLevel pre-tokenizer is part of this one (the vocab is then byte-level).
  virtual bool is_byte_level() const { return false; }
};

/// Build from the JSON object (null -> nullptr). Throws Error "unsupported pre_tokenizer type 'X'".
std::unique_ptr<PreTokenizer> make_pre_tokenizer(const nlohmann::json& j);

/// The GPT-2 split pattern (openai/gpt-2 encoder.py), used by ByteLevel with use_regex.
extern const char* const kGpt2SplitPattern;

}  // namespace tpshard
