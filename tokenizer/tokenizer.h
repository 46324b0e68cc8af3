// tokenizer.h: text <-> token ids exactly as Hugging Face tokenizers does it, for the families we
// support (byte-level BPE: GPT-2, GPT-NeoX, Llama 3, Qwen2, SmolLM; SentencePiece-style BPE with
// byte_fallback: Llama 2), from tokenizer.json, or tokenizer.model through libsentencepiece.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace tpshard {

class Tokenizer {
 public:
  /// Load from a directory holding tokenizer.json (preferred) or tokenizer.model, plus optional
  /// tokenizer_config.json / special_tokens_map.json. Works on a converted model dir and on a HF dir.
  /// Throws Error naming the file; an unsupported component names its "type".
  static std::unique_ptr<Tokenizer> load(const std::string& dir);
  virtual ~Tokenizer() = default;

  /// Token ids of text. add_special_tokens applies the post-processor (e.g. BOS for Llama 2).
  /// Special/added token strings in text are matched per added_tokens. Invalid UTF-8 is replaced by U+FFFD.
  virtual std::vector<int32_t> encode(const std::string& text, bool add_special_tokens = true) const = 0;
  /// Text of ids. Throws Error naming an id outside the vocabulary.
  virtual std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens = false) const = 0;
  virtual int64_t vocab_size() const = 0;       ///< including added tokens
  virtual int32_t bos_id() const = 0;           ///< -1 when none
  virtual std::vector<int32_t> eos_ids() const = 0;  ///< may be empty
  virtual bool is_special(int32_t id) const = 0;
};

/// Streaming detokenizer for generation: push ids one by one; returns the text that is now final.
/// Never returns half a UTF-8 character; handles SentencePiece's leading-space rules like decode().
class StreamDecoder {
 public:
  StreamDecoder(const Tokenizer& tok, bool skip_special_tokens = true);
  std::string push(int32_t id);
  std::string flush();  ///< whatever is left (incomplete UTF-8 becomes U+FFFD)

 private:
  const Tokenizer& tok_;
  bool skip_special_;
  std::vector<int32_t> ids_;
  size_t emitted_bytes_ = 0;
};

}  // namespace tpshard
