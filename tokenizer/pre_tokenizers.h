// pre_tokenizers.h: the tokenizer.json "pre_tokenizer" components: ByteLevel (GPT-2 split regex),
// Split (Regex or String pattern, all five behaviours, invert), Digits, Metaspace, Whitespace,
// WhitespaceSplit and Sequence. Pieces are raw UTF-8; the byte-level alphabet mapping is not done
// here: the BPE model works on raw bytes instead (see bpe.h BpeOptions::byte_level).
#pragma once
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace tpshard {

/// Pieces of text as byte spans [begin, end) into one buffer (no string per piece: the hot path
/// of encode). Splitting pre-tokenizers only refine spans; Metaspace and ByteLevel's
/// add_prefix_space rewrite the buffer.
struct Pieces {
  std::string buf;
  std::vector<std::pair<size_t, size_t>> spans;
  std::string_view piece(size_t k) const { return std::string_view(buf).substr(spans[k].first, spans[k].second - spans[k].first); }
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  /// Split every piece further, in place. at_start: the first piece begins at offset 0 of the
  /// user's text (matters for Metaspace prepend_scheme "first").
  virtual void split(Pieces& pieces, bool at_start) const = 0;
  /// True when a ByteLevel pre-tokenizer is part of this one (the vocab is then byte-level).
  virtual bool is_byte_level() const { return false; }
};

/// The "replacement" of a Metaspace pre-tokenizer or decoder object j (default U+2581): exactly one
/// well-formed UTF-8 character, as HF tokenizers' Metaspace (a char) requires. Throws Error naming the
/// component (`what`: "pre_tokenizer" / "decoder") otherwise: an empty replacement would never advance.
std::string metaspace_replacement(const nlohmann::json& j, const char* what);

/// Build from the JSON object (null -> nullptr). Throws Error "unsupported pre_tokenizer type 'X'".
std::unique_ptr<PreTokenizer> make_pre_tokenizer(const nlohmann::json& j);

/// The GPT-2 split pattern (openai/gpt-2 encoder.py), used by ByteLevel with use_regex.
extern const char* const kGpt2SplitPattern;

}  // namespace tpshard
