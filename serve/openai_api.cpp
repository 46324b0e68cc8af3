// openai_api.cpp: see openai_api.h.
#include "serve/openai_api.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "format/error.h"
#include "format/json_depth.h"
#include "serve/choice_logprobs.h"

namespace tpshard::serve {
namespace {

using json = nlohmann::json;
using ordered_json = nlohmann::ordered_json;

[[noreturn]] void bad(const std::string& message) { throw ApiError{400, message}; }

/// A number as an error message shows it: at most 6 significant digits (1e+308, 0.5, 100).
std::string fmt_number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

double number(const json& body, const char* key, double fallback, double lo, double hi) {
  const auto it = body.find(key);
  if (it == body.end() || it->is_null()) return fallback;
  if (!it->is_number()) bad(std::string("'") + key + "' must be a number");
  const double v = it->get<double>();
  if (!(v >= lo && v <= hi)) bad(std::string("'") + key + "' = " + fmt_number(v) + " is outside [" + fmt_number(lo) + ", " + fmt_number(hi) + "]");
  return v;
}

int64_t integer(const json& body, const char* key, int64_t fallback, int64_t lo, int64_t hi) {
  const auto it = body.find(key);
  if (it == body.end() || it->is_null()) return fallback;
  if (it->is_number_float() && std::isfinite(it->get<double>()) && std::floor(it->get<double>()) == it->get<double>() &&
      std::fabs(it->get<double>()) >= 9.2e18)  // an integer too large for JSON's integer types
    bad(std::string("'") + key + "' = " + fmt_number(it->get<double>()) + " is outside [" + std::to_string(lo) + ", " +
        std::to_string(hi) + "]");
  if (!it->is_number_integer()) bad(std::string("'") + key + "' must be an integer");
  const int64_t v = it->is_number_unsigned() ? static_cast<int64_t>(std::min<uint64_t>(it->get<uint64_t>(), INT64_MAX))
                                             : it->get<int64_t>();
  if (v < lo || v > hi) bad(std::string("'") + key + "' = " + std::to_string(v) + " is outside [" + std::to_string(lo) +
                            ", " + std::to_string(hi) + "]");
  return v;
}

bool boolean(const json& body, const char* key, bool fallback) {
  const auto it = body.find(key);
  if (it == body.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) bad(std::string("'") + key + "' must be true or false");
  return it->get<bool>();
}

/// Refuses a field the endpoint does not know (a typo would otherwise be ignored silently), and the
/// OpenAI fields we accept only at their neutral value.
void check_fields(const json& body, const std::vector<const char*>& known) {
  for (auto it = body.begin(); it != body.end(); ++it) {
    const std::string& key = it.key();
    if (std::find_if(known.begin(), known.end(), [&key](const char* k) { return key == k; }) == known.end())
      bad("unknown field '" + key + "'");
  }
  if (body.contains("logit_bias") && !body["logit_bias"].is_null() && !body["logit_bias"].empty())
    bad("'logit_bias' is not supported");
  if (body.contains("suffix") && !body["suffix"].is_null()) bad("'suffix' is not supported");
}

/// The fields both endpoints take (sampling, stopping, streaming, bookkeeping).
const std::vector<const char*> kCommonFields = {
    "model", "max_tokens", "temperature", "top_p", "top_k", "min_p", "repetition_penalty", "min_tokens", "stop",
    "seed", "n", "best_of", "stream", "stream_options", "ignore_eos", "frequency_penalty", "presence_penalty", "user",
    "logit_bias"};

std::vector<const char*> with(std::vector<const char*> v, std::initializer_list<const char*> more) {
  v.insert(v.end(), more.begin(), more.end());
  return v;
}

/// The options common to completions and chat completions; d: the model's defaults of omitted fields.
SamplingParams sampling(const json& body, int64_t default_max_tokens, const GenerationDefaults& d) {
  const int64_t n = integer(body, "n", 1, INT64_MIN, INT64_MAX);
  if (n < 1) bad("'n' = " + std::to_string(n) + " is below 1 (choices per prompt)");
  if (n > kMaxChoices) bad("'n' = " + std::to_string(n) + " is above " + std::to_string(kMaxChoices) + " (choices per prompt)");
  const int64_t best_of = integer(body, "best_of", n, 1, INT32_MAX);
  if (best_of != 1 && best_of != n) bad("'best_of' must be 1 or equal to 'n' (every choice is returned)");
  if (number(body, "frequency_penalty", 0, -2, 2) != 0 || number(body, "presence_penalty", 0, -2, 2) != 0)
    bad("'frequency_penalty' and 'presence_penalty' are not supported (use repetition_penalty)");
  SamplingParams p;
  p.max_new_tokens = static_cast<int>(integer(body, "max_tokens", default_max_tokens, 0, INT32_MAX));
  if (body.contains("max_completion_tokens"))
    p.max_new_tokens = static_cast<int>(integer(body, "max_completion_tokens", p.max_new_tokens, 0, INT32_MAX));
  p.min_new_tokens = static_cast<int>(integer(body, "min_tokens", 0, 0, INT32_MAX));
  p.temperature = static_cast<float>(number(body, "temperature", d.temperature.value_or(1.0f), 0, 100));
  p.top_p = static_cast<float>(number(body, "top_p", d.top_p.value_or(1.0f), 1e-9, 1));
  p.top_k = static_cast<int>(std::max<int64_t>(0, integer(body, "top_k", d.top_k.value_or(0), -1, INT32_MAX)));
  p.min_p = static_cast<float>(number(body, "min_p", d.min_p.value_or(0.0f), 0, 1));
  p.repetition_penalty =
      static_cast<float>(number(body, "repetition_penalty", d.repetition_penalty.value_or(1.0f), 1e-6, 100));
  p.seed = static_cast<uint64_t>(integer(body, "seed", 0, INT64_MIN, INT64_MAX));
  p.ignore_eos = boolean(body, "ignore_eos", false);
  if (const auto it = body.find("stop"); it != body.end() && !it->is_null()) {
    if (it->is_string()) {
      p.stop.push_back(it->get<std::string>());
    } else if (it->is_array() && it->size() <= 16) {
      for (const json& s : *it) {
        if (!s.is_string()) bad("'stop' must be a string or a list of up to 16 strings");
        p.stop.push_back(s.get<std::string>());
      }
    } else {
      bad("'stop' must be a string or a list of up to 16 strings");
    }
    for (const std::string& s : p.stop)
      if (s.empty()) bad("'stop' strings must not be empty");
  }
  return p;
}

std::vector<int32_t> token_list(const json& a, const ApiLimits& limits) {
  std::vector<int32_t> ids;
  for (const json& t : a) {
    if (!t.is_number_integer()) bad("'prompt' token lists must hold integers");
    const int64_t id = t.is_number_unsigned() ? static_cast<int64_t>(std::min<uint64_t>(t.get<uint64_t>(), INT64_MAX))
                                              : t.get<int64_t>();
    if (id < 0 || id >= limits.vocab_size)
      bad("token id " + std::to_string(id) + " is outside the vocabulary (0.." + std::to_string(limits.vocab_size - 1) + ")");
    ids.push_back(static_cast<int32_t>(id));
  }
  return ids;
}

/// The choices of every prompt: prompt i's request becomes n requests at i * n + c, each keeping the prompt's
/// id (which keys the RNG) with seed + c, so choice c equals a one-choice request with that seed.
void expand_choices(ApiRequest& r, const json& body) {
  r.n = static_cast<int>(integer(body, "n", 1, 1, kMaxChoices));
  if (r.n == 1) return;
  std::vector<GenerationRequest> choices;
  choices.reserve(r.prompts.size() * static_cast<size_t>(r.n));
  for (const GenerationRequest& g : r.prompts)
    for (int c = 0; c < r.n; ++c) {
      choices.push_back(g);
      choices.back().params.seed = g.params.seed + static_cast<uint64_t>(c);
    }
  r.prompts = std::move(choices);
}

/// `stream_options`: an object with at most `include_usage` (a boolean), and only with `stream` true.
void stream_options(const json& body, ApiRequest* r) {
  const auto it = body.find("stream_options");
  if (it == body.end() || it->is_null()) return;
  if (!r->stream) bad("'stream_options' is only allowed with 'stream': true");
  if (!it->is_object()) bad("'stream_options' must be an object");
  for (const auto& [key, value] : it->items()) {
    if (key != "include_usage") bad("'stream_options." + key + "' is not supported (only 'include_usage')");
    if (!value.is_boolean()) bad("'stream_options.include_usage' must be a boolean");
    r->stream_usage = value.get<bool>();
  }
}

/// usage of a response: prompt_tokens counts each prompt once, completion_tokens every choice's tokens.
ordered_json usage_of(const ApiRequest& req, const std::vector<GenerationResult>& results) {
  int64_t prompt_tokens = 0, completion_tokens = 0;
  for (size_t i = 0; i < results.size() && i < req.prompts.size(); ++i) {
    if (i % static_cast<size_t>(std::max(1, req.n)) == 0) prompt_tokens += static_cast<int64_t>(req.prompts[i].prompt_ids.size());
    completion_tokens += static_cast<int64_t>(results[i].output_ids.size());
  }
  return {{"prompt_tokens", prompt_tokens}, {"completion_tokens", completion_tokens},
          {"total_tokens", prompt_tokens + completion_tokens}};
}

void check_fits(const ApiRequest& r, const ApiLimits& limits) {
  for (const GenerationRequest& g : r.prompts) {
    try {
      // chat: the conversation as the chat template rendered it; the counts by the API's field names
      check_request(g, limits.max_seq_len, r.chat ? std::string("messages (rendered by the chat template)") : "prompt " + g.id,
                    limits.model_seq_limit, TokenCountNames{"max_tokens", "min_tokens"});
    } catch (const Error& e) {
      bad(std::string(e.what()) + (e.hint().empty() ? "" : " (" + e.hint() + ")"));
    }
  }
}

std::string dump(const ordered_json& j) { return j.dump(-1, ' ', false, ordered_json::error_handler_t::replace); }

}  // namespace

json parse_body(const std::string& text) {
  json body;
  try {
    body = json::parse(text, json_depth_guard("request body"));
  } catch (const Error& e) {
    bad(e.what());
  } catch (const json::exception& e) {
    // parse_error (and out_of_range for a number beyond double). nlohmann's text names line, column and
    // cause ("... - invalid string: ill-formed UTF-8 byte"); its "last read" part may quote the body's
    // bytes (not always UTF-8), so it is left out
    const std::string what = e.what();
    const size_t at = what.find("parse error"), read = what.find("; last read"), expected = what.rfind("; expected ");
    const size_t tag = what.find("] ");
    std::string why = at != std::string::npos    ? what.substr(at, read == std::string::npos ? read : read - at)
                      : tag != std::string::npos ? what.substr(tag + 2)
                                                 : std::string();
    if (!why.empty() && read != std::string::npos && expected != std::string::npos && expected > read)
      why += what.substr(expected);
    bad("the body is not valid JSON" + (why.empty() ? std::string() : ": " + why));
  }
  return body;
}

ApiRequest parse_completion(const json& body, const Tokenizer& tok, const ApiLimits& limits) {
  if (!body.is_object()) bad("the body must be a JSON object");
  static const std::vector<const char*> known = with(kCommonFields, {"prompt", "echo", "logprobs", "suffix"});
  check_fields(body, known);
  ApiRequest r;
  r.stream = boolean(body, "stream", false);
  stream_options(body, &r);
  r.echo = boolean(body, "echo", false);
  r.logprobs = static_cast<int>(integer(body, "logprobs", -1, 0, 20));  // null or absent: none
  if (body.contains("logprobs") && body["logprobs"].is_boolean()) bad("'logprobs' of completions is an integer (0..20)");
  const SamplingParams p = sampling(body, 16, limits.defaults);
  const auto it = body.find("prompt");
  if (it == body.end() || it->is_null()) bad("'prompt' is required");
  std::vector<std::vector<int32_t>> prompts;
  if (it->is_string()) {
    prompts.push_back(tok.encode(it->get<std::string>(), true));
  } else if (it->is_array() && it->empty()) {
    bad("'prompt' is an empty list");
  } else if (it->is_array() && (*it)[0].is_number_integer()) {
    prompts.push_back(token_list(*it, limits));
  } else if (it->is_array()) {
    for (const json& e : *it) {
      if (e.is_string()) prompts.push_back(tok.encode(e.get<std::string>(), true));
      else if (e.is_array() && e.empty()) bad("prompt " + std::to_string(prompts.size()) + " is an empty list of token ids");
      else if (e.is_array()) prompts.push_back(token_list(e, limits));
      else bad("'prompt' must be a string, a list of strings, a list of token ids or a list of such lists");
    }
  } else {
    bad("'prompt' must be a string, a list of strings, a list of token ids or a list of such lists");
  }
  if (prompts.size() > 4096) bad("at most 4096 prompts per request");
  if (prompts.size() * static_cast<size_t>(integer(body, "n", 1, 1, kMaxChoices)) > 4096)
    bad("at most 4096 choices per request (prompts x n)");
  for (size_t i = 0; i < prompts.size(); ++i) {
    GenerationRequest g;
    g.id = std::to_string(i);
    g.prompt_ids = prompts[i].empty() && tok.bos_id() >= 0 ? std::vector<int32_t>{tok.bos_id()} : prompts[i];
    g.params = p;
    if (r.logprobs >= 0) g.params.logprobs = r.logprobs;
    if (r.echo && r.logprobs >= 0) g.params.prompt_logprobs = r.logprobs;
    r.prompts.push_back(std::move(g));
  }
  check_fits(r, limits);
  expand_choices(r, body);
  return r;
}

ApiRequest parse_chat(const json& body, const Tokenizer& tok, const ChatTemplate* tmpl, const ApiLimits& limits) {
  if (!body.is_object()) bad("the body must be a JSON object");
  static const std::vector<const char*> known = with(kCommonFields, {"messages", "max_completion_tokens", "logprobs", "top_logprobs"});
  check_fields(body, known);
  if (tmpl == nullptr) bad("this model has no chat template (chat_template.jinja or tokenizer_config.json): use /v1/completions");
  ApiRequest r;
  r.chat = true;
  r.stream = boolean(body, "stream", false);
  stream_options(body, &r);
  const bool logprobs = boolean(body, "logprobs", false);
  const int top_logprobs = static_cast<int>(integer(body, "top_logprobs", 0, 0, 20));
  if (!logprobs && body.contains("top_logprobs") && !body["top_logprobs"].is_null())
    bad("'top_logprobs' requires 'logprobs': true");
  if (logprobs) r.logprobs = top_logprobs;
  const auto it = body.find("messages");
  if (it == body.end() || !it->is_array() || it->empty()) bad("'messages' must be a non-empty list");
  std::vector<ChatMessage> messages;
  for (const json& m : *it) {
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string()) bad("each message needs a string 'role'");
    // "content" may be null only for an assistant turn (one that carried tool calls); others need text
    if (!m.contains("content") || (m["content"].is_null() && m["role"] != "assistant"))
      bad("each message needs a 'content' (a string or a list of text parts; null only for role 'assistant')");
    const json& c = m["content"];
    std::string content;
    if (c.is_string()) {
      content = c.get<std::string>();
    } else if (c.is_array()) {  // content parts: only text
      for (const json& part : c) {
        if (!part.is_object() || !part.contains("type") || part["type"] != "text" || !part.contains("text") ||
            !part["text"].is_string())
          bad("message content parts must be {\"type\": \"text\", \"text\": ...}");
        content += part["text"].get<std::string>();
      }
    } else if (!c.is_null()) {
      bad("message 'content' must be a string or a list of text parts");
    }
    messages.push_back({m["role"].get<std::string>(), content});
  }
  std::string text;
  try {
    text = render_chat(*tmpl, messages, true);
  } catch (const Error& e) {
    bad(e.what());
  }
  GenerationRequest g;
  g.id = "0";
  g.prompt_ids = tok.encode(text, false);
  if (g.prompt_ids.empty()) bad("the rendered conversation has no tokens");
  const int64_t room = limits.max_seq_len - static_cast<int64_t>(g.prompt_ids.size()) + 1;  // as many as fit
  g.params = sampling(body, std::max<int64_t>(1, room), limits.defaults);
  g.params.logprobs = r.logprobs;
  r.prompts.push_back(std::move(g));
  check_fits(r, limits);
  expand_choices(r, body);
  return r;
}

std::string openai_finish_reason(const std::string& ours) {
  if (ours == "length" || ours == "abort") return ours;
  return "stop";
}

nlohmann::ordered_json response_body(const ApiRequest& req, const std::vector<GenerationResult>& results, const Tokenizer& tok,
                   const std::string& id, int64_t created, const std::string& model) {
  ordered_json choices = ordered_json::array();
  for (size_t i = 0; i < results.size(); ++i) {
    const GenerationResult& res = results[i];
    const GenerationRequest& g = req.prompts[i];
    ordered_json c;
    c["index"] = i;
    if (req.chat) c["message"] = {{"role", "assistant"}, {"content", res.text}};
    else c["text"] = prompt_echo(req, i, tok) + res.text;
    if (req.logprobs >= 0) {
      ChoiceLogprobs lp(tok, g.prompt_ids, req.echo, req.logprobs, req.chat);
      lp.add(res);
      c["logprobs"] = lp.take();
    } else {
      c["logprobs"] = nullptr;
    }
    c["finish_reason"] = openai_finish_reason(res.finish_reason);
    choices.push_back(c);
  }
  ordered_json j;
  j["id"] = id;
  j["object"] = req.chat ? "chat.completion" : "text_completion";
  j["created"] = created;
  j["model"] = model;
  j["choices"] = choices;
  j["usage"] = usage_of(req, results);
  return j;
}

std::string prompt_echo(const ApiRequest& req, size_t index, const Tokenizer& tok) {
  return req.echo && !req.chat ? tok.decode(req.prompts[index].prompt_ids, true) : std::string();
}

namespace {

/// The fields every streamed chunk starts with.
ordered_json chunk_head(const ApiRequest& req, const std::string& id, int64_t created, const std::string& model) {
  ordered_json j;
  j["id"] = id;
  j["object"] = req.chat ? "chat.completion.chunk" : "text_completion";
  j["created"] = created;
  j["model"] = model;
  return j;
}

}  // namespace

std::string stream_event(const ApiRequest& req, size_t index, const std::string& text, const std::string& finish_reason,
                         bool first, const std::string& id, int64_t created, const std::string& model,
                         const ordered_json& logprobs) {
  json c;
  c["index"] = index;
  if (req.chat) {
    ordered_json delta = ordered_json::object();
    if (first) delta["role"] = "assistant";
    if (!text.empty() || finish_reason.empty()) delta["content"] = text;
    c["delta"] = delta;
  } else {
    c["text"] = text;
  }
  c["logprobs"] = logprobs;
  c["finish_reason"] = finish_reason.empty() ? ordered_json() : ordered_json(openai_finish_reason(finish_reason));
  ordered_json j = chunk_head(req, id, created, model);
  j["choices"] = ordered_json::array({c});
  if (req.stream_usage) j["usage"] = nullptr;
  return "data: " + dump(j) + "\n\n";
}

std::string stream_usage_event(const ApiRequest& req, const std::vector<GenerationResult>& results, const std::string& id,
                               int64_t created, const std::string& model) {
  ordered_json j = chunk_head(req, id, created, model);
  j["choices"] = ordered_json::array();
  j["usage"] = usage_of(req, results);
  return "data: " + dump(j) + "\n\n";
}

json error_body(const ApiError& e) {
  const char* type = e.status == 404 ? "not_found_error" : e.status >= 500 ? "service_unavailable_error"
                     : e.status == 429                 ? "rate_limit_error"
                     : e.status == 401                 ? "authentication_error"
                                                       : "invalid_request_error";
  return {{"error", {{"message", e.message}, {"type", type}, {"code", e.status}}}};
}

}  // namespace tpshard::serve
