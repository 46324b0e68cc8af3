// choice_logprobs.h: the OpenAI `logprobs` object of one choice, in the form of completions ({tokens,
// token_logprobs, top_logprobs, text_offset}) or of chat completions ({content: [{token, logprob, bytes,
// top_logprobs}], refusal}). Built from a GenerationResult as it grows, so that the objects of a stream's
// chunks concatenate to the object of the whole response.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/generate.h"
#include "tokenizer/tokenizer.h"

namespace tpshard::serve {

/// The logprobs of one choice, added token by token and taken out in parts (one per streamed chunk, or
/// one for the whole response). A token's log-probability is GenerationResult's (log_softmax of the
/// logits, before penalties and temperature); its string is the text it adds to the returned text after
/// the token before it (SentencePiece's "▁upon" after "Once" reads " upon"; a special token: its own text,
/// such as "<s>", which adds nothing). Its bytes may be part of a UTF-8 character (JSON output replaces
/// what is invalid; chat's `bytes` keep them). Completions' text_offset
/// indexes the returned text (with echo, the prompt's text first); top_logprobs objects list the
/// alternatives most likely first. Objects are ordered_json, so their keys keep that order when printed.
class ChoiceLogprobs {
 public:
  /// prompt: the choice's prompt ids (kept by reference: they must outlive this); echo (completions): the
  /// prompt's tokens come first, the first with null log-probability; top: alternatives per token (0..20);
  /// chat: the chat completions form.
  ChoiceLogprobs(const Tokenizer& tok, const std::vector<int32_t>& prompt, bool echo, int top, bool chat);

  /// Adds what `so_far` holds that was not added yet: with echo, the prompt's tokens (once), then the
  /// output ids up to so_far.text_tokens (those whose text was given out).
  void add(const GenerationResult& so_far);

  /// The object of the tokens added since the last take() (the first: since the start); empty lists when
  /// none were.
  nlohmann::ordered_json take();

 private:
  void put(int32_t token, const TokenLogprob* lp);

  const Tokenizer& tok_;
  const std::vector<int32_t>& prompt_;
  bool echo_ = false;
  int top_ = 0;
  bool chat_ = false;
  bool prompt_added_ = false;
  size_t outputs_added_ = 0;
  int32_t prev_ = -1;   ///< the token before the next one
  size_t offset_ = 0;   ///< completions: text_offset of the next token
  nlohmann::ordered_json tokens_, token_logprobs_, top_logprobs_, text_offset_;  ///< completions, since the last take()
  nlohmann::ordered_json content_;                                               ///< chat, since the last take()
};

}  // namespace tpshard::serve
