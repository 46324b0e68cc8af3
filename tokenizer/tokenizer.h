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

  // Additions (non-pure, so existing implementations of this interface keep compiling).
  /// The token string as stored in the file (byte-level alphabet / SentencePiece pieces);
  /// empty when id is outside the vocabulary.
  virtual std::string id_to_token(int32_t id) const { (void)id; return {}; }
  /// Id of a token string as stored in the file (vocab or added token); -1 when absent.
  virtual int32_t token_to_id(const std::string& token) const { (void)token; return -1; }
  /// tokenizer_config.json "model_max_length"; 0 when unknown (HF's 1e30 sentinel counts as unknown).
  virtual int64_t model_max_length() const { return 0; }
};

/// Streaming detokenizer for generation: push ids one by one; returns the text that is now final.
/// Never returns half a UTF-8 character; handles SentencePiece's leading-space rules like decode().
/// Same algorithm as Hugging Face tokenizers' DecodeStream: decode a small window of ids (context +
/// new), emit the part after the context's text once it does not end in U+FFFD (an incomplete
/// character), then make the new ids the next context. Cost per push: O(window), not O(all ids).
class StreamDecoder {
 public:
  StreamDecoder(const Tokenizer& tok, bool skip_special_tokens = true);
  /// Throws Error (like decode) for an id outside the vocabulary; the stream is then unchanged.
  std::string push(int32_t id);
  std::string flush();  ///< whatever is left (incomplete UTF-8 becomes U+FFFD)
  /// Start the stream after `context` (e.g. the prompt; its last few ids are kept), so the first pushed
  /// token is decoded as a continuation: with SentencePiece-style decoders that strip the leading space
  /// of a sequence, prompt "Lily" + token "▁and" streams " and", not "and" (the text of
  /// decode(prompt + output) minus decode(prompt), as Hugging Face pipelines return it).
  /// Call before the first push. Ids outside the vocabulary are ignored.
  void prime(const std::vector<int32_t>& context);

 private:
  const Tokenizer& tok_;
  bool skip_special_;
  std::vector<int32_t> ids_;   ///< window: ids already emitted (context) + ids not yet emitted
  size_t emitted_bytes_ = 0;   ///< bytes of decode(ids_[0, read_index_)) (the context text)
  size_t read_index_ = 0;      ///< ids_[0, read_index_) are context whose text was already returned
  std::string prefix_text_;    ///< decode(ids_[0, read_index_))
};

}  // namespace tpshard
