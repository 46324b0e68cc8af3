// openai_api.h: the OpenAI-compatible request and response bodies of `tprun serve` (the subset the
// `openai` Python client and lm-evaluation-harness's local-completions / local-chat-completions send),
// as pure functions from JSON to GenerationRequests and from GenerationResults back to JSON.
// Owns: parsing and validating bodies, response bodies, streaming chunks. Does not own: the logprobs objects
// and token strings (serve/choice_logprobs.h), HTTP (serve/server.h) or running the model. Schema: https://platform.openai.com/docs/api-reference
// (legacy completions and chat completions).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/chat_template.h"
#include "runtime/generation_defaults.h"
#include "runtime/generate.h"
#include "tokenizer/tokenizer.h"

namespace tpshard::serve {

/// A request the server refuses: HTTP status (400 for a bad body) and the message of the OpenAI error
/// object {"error": {"message", "type": "invalid_request_error", "code": status}}.
struct ApiError {
  int status = 400;
  std::string message;
};

/// The most choices per prompt (`n`); more is a 400.
constexpr int kMaxChoices = 16;

/// What the model must run for one HTTP request: one GenerationRequest per choice, choice index
/// prompt_index * n + c (c = 0..n-1), as OpenAI numbers the choices of a list of prompts. Each is its own
/// sequence of the continuous batch; choice c samples with seed + c under the prompt's id, so it equals a
/// request with n = 1 and that seed.
struct ApiRequest {
  bool chat = false;
  int n = 1;                    ///< choices per prompt (1..kMaxChoices)
  bool stream = false;
  bool stream_usage = false;    ///< `stream_options.include_usage`: chunks carry "usage": null, a last chunk the usage
  bool echo = false;            ///< completions: the prompt is part of the returned text and logprobs
  /// Log-probabilities with this many top alternatives per token (0..20), -1: none. Completions: `logprobs`;
  /// chat: `top_logprobs` (default 0) when `logprobs` is true.
  int logprobs = -1;
  std::vector<GenerationRequest> prompts;
};

/// Limits the server checks requests against, and the defaults of the fields a request leaves out.
struct ApiLimits {
  int64_t max_seq_len = 0;      ///< positions per sequence (the runner's)
  int64_t model_seq_limit = 0;  ///< the model's context (model_position_limit), 0: unknown
  int64_t vocab_size = 0;       ///< the model's (ids must be below it)
  /// The model's generation_config.json values (empty with --generation-config none): a value held here
  /// replaces the OpenAI default of temperature, top_p, top_k, min_p and repetition_penalty (max_new_tokens
  /// is not used: max_tokens keeps its default, which is sized to the context).
  GenerationDefaults defaults;
};

/// An HTTP body as JSON. Throws ApiError 400 when it is not JSON or nests deeper than kMaxJsonDepth
/// (format/json_depth.h: a deep value would overflow the stack when later copied or printed).
nlohmann::json parse_body(const std::string& text);

/// POST /v1/completions body -> ApiRequest. prompt: a string, a list of strings, a list of token ids or a
/// list of such lists; max_tokens (default 16), temperature (default 1), top_p, top_k (<= 0: off),
/// (those defaults: the OpenAI API's, or limits.defaults where it holds a value),
/// min_p, repetition_penalty, min_tokens, stop (string or list), seed, n (1..kMaxChoices), echo, logprobs
/// (0..20), stream, ignore_eos; model and user are accepted and ignored. Text prompts are encoded with the
/// tokenizer (special tokens added). Throws ApiError for a missing prompt, an unknown field, a wrong type,
/// an unsupported option value (n > kMaxChoices, best_of other than 1 or n, non-zero frequency / presence penalty, logit_bias,
/// suffix), a prompt that does not fit (check_request's message, naming both lengths).
ApiRequest parse_completion(const nlohmann::json& body, const Tokenizer& tok, const ApiLimits& limits);

/// POST /v1/chat/completions body -> ApiRequest: messages [{role, content}] rendered with the model's chat
/// template (tmpl; nullptr: the model has none -> ApiError) and encoded without extra special tokens;
/// max_tokens / max_completion_tokens (default: as many as fit), the sampling options of
/// parse_completion, stream, logprobs (true / false) and top_logprobs (0..20; only with logprobs true).
/// Throws ApiError as parse_completion.
ApiRequest parse_chat(const nlohmann::json& body, const Tokenizer& tok, const ChatTemplate* tmpl,
                      const ApiLimits& limits);

/// The response body of a finished request (results: one per choice, in order). logprobs, when asked:
/// completions {tokens, token_logprobs, top_logprobs, text_offset}, chat {content, refusal}
/// (serve/choice_logprobs.h), of the output ids up to text_tokens (after the prompt's with echo). usage: prompt_tokens counts
/// each prompt once (not once per choice, as OpenAI), completion_tokens every choice's tokens.
/// id: "cmpl-N" / "chatcmpl-N"; created: Unix seconds; model: the served model name.
nlohmann::ordered_json response_body(const ApiRequest& req, const std::vector<GenerationResult>& results,
                             const Tokenizer& tok, const std::string& id, int64_t created, const std::string& model);

/// The text completions echo before choice `index`'s output: its decoded prompt with `echo`, else "".
std::string prompt_echo(const ApiRequest& req, size_t index, const Tokenizer& tok);

/// One server-sent event "data: {...}\n\n" of a streamed response: a text piece of choice `index`, or with
/// finish_reason (non-empty) the last chunk of that choice. Chat: the first chunk of a choice also
/// carries delta.role "assistant". logprobs: the chunk's `logprobs` (ChoiceLogprobs::take of its tokens;
/// null when not asked).
std::string stream_event(const ApiRequest& req, size_t index, const std::string& text, const std::string& finish_reason,
                         bool first, const std::string& id, int64_t created, const std::string& model,
                         const nlohmann::ordered_json& logprobs = nullptr);

/// The last event of a stream with `stream_options.include_usage`, before [DONE]: no choices, the usage
/// of the whole response (as response_body counts it).
std::string stream_usage_event(const ApiRequest& req, const std::vector<GenerationResult>& results, const std::string& id,
                               int64_t created, const std::string& model);

/// The OpenAI error body of e.
nlohmann::json error_body(const ApiError& e);

/// OpenAI finish_reason of a GenerationResult's: "eos" and "stop" -> "stop", "length" -> "length", "abort"
/// (cancelled: the client went away, or the drain after a stop signal timed out) -> "abort" (as vLLM).
std::string openai_finish_reason(const std::string& ours);

}  // namespace tpshard::serve
