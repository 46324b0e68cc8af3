// generate_jsonl.cpp: JSONL prompts in, JSONL generations out (see generate_jsonl.h).
#include "eval/generate_jsonl.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <limits>
#include <type_traits>
#include <unordered_set>

#include "eval/batch_job.h"
#include "eval/json_fields.h"
#include "eval/resumable_jsonl.h"
#include "format/error.h"

namespace tpshard::eval {
namespace {

using nlohmann::json;

const char* kBadHint = "fix the line, or pass --on-bad-record skip to leave such lines out";
constexpr int kIntMax = std::numeric_limits<int>::max();  // SamplingParams' token counts are int

/// A true/false or number field of rec (absent or null: `out` keeps its default).
template <typename T>
void read_param(const json& rec, const char* name, T& out, const std::string& where) {
  static_assert(!std::is_integral_v<T> || std::is_same_v<T, bool>, "integer fields: read_integer");
  auto it = rec.find(name);
  if (it == rec.end() || it->is_null()) return;
  const bool ok = std::is_same_v<T, bool> ? it->is_boolean() : it->is_number();
  if (!ok)
    throw Error(where + ": \"" + name + "\" is " + it->dump() + ", expected " +
                    (std::is_same_v<T, bool> ? "true/false" : "a number"),
                kBadHint);
  out = it->get<T>();
}

/// An integer field of rec in lo..hi (absent or null: `out` keeps its default); anything else, e.g.
/// 4294967297 for an int, 2.5 or 1e30, is refused naming the field, the value and the range.
template <typename T>
void read_integer(const json& rec, const char* name, T& out, T lo, T hi, const std::string& where) {
  auto it = rec.find(name);
  if (it == rec.end() || it->is_null()) return;
  out = json_integer<T>(*it, lo, hi, where, name, kBadHint);
}

/// The keys a request line may have; anything else is reported once per name (a typo such as
/// "max_new_token" would otherwise silently fall back to the default).
const char* const kKnownKeys[] = {"id", "prompt", "prompt_ids", "messages", "max_new_tokens", "min_new_tokens", "temperature",
                                  "top_k", "top_p", "min_p", "repetition_penalty", "seed", "ignore_eos", "stop"};

/// Warn on stderr (output rank only) about keys of rec that no request field reads, once per key name.
void warn_unknown_keys(const json& rec, const std::string& where, std::unordered_set<std::string>& warned, bool print) {
  if (!rec.is_object()) return;
  for (auto it = rec.begin(); it != rec.end(); ++it) {
    bool known = false;
    for (const char* k : kKnownKeys) known = known || it.key() == k;
    if (known || !warned.insert(it.key()).second || !print) continue;
    std::string list;
    for (const char* k : kKnownKeys) list += std::string(list.empty() ? "" : ", ") + k;
    std::fprintf(stderr, "warning: %s: key \"%s\" is not a request field and is ignored (reported once; fields: %s)\n",
                 where.c_str(), it.key().c_str(), list.c_str());
  }
}

struct ParsedLine {
  BatchItem item;
  std::string prompt_text;
};

/// The "messages" of a record rendered with the chat template (the prompt text of the request).
std::string render_messages(const json& list, const std::string& where, const JsonlChat& chat) {
  if (!list.is_array() || list.empty())
    throw Error(where + ": \"messages\" must be a non-empty list of {\"role\", \"content\"}", kBadHint);
  std::vector<ChatMessage> messages;
  for (size_t i = 0; i < list.size(); ++i) {
    const json& m = list[i];
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string() || !m.contains("content") ||
        !m["content"].is_string())
      throw Error(where + ": messages[" + std::to_string(i) + "] needs string \"role\" and \"content\"", kBadHint);
    messages.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
  }
  if (chat.tmpl == nullptr)
    throw Error(where + ": \"messages\" needs a chat template, and there is none: " + chat.missing,
                "pass one with --chat-template FILE, or write the prompt as \"prompt\"");
  try {
    return render_chat(*chat.tmpl, messages, true);
  } catch (const Error& e) {
    throw Error(where + ": " + e.what(), kBadHint);
  }
}

ParsedLine parse_line(const json& rec, size_t line_no, const std::string& where, const Tokenizer& tok,
                      const SamplingParams& defaults, const JsonlChat& chat) {
  if (!rec.is_object()) throw Error(where + ": expected a JSON object, got " + std::string(rec.type_name()), kBadHint);
  ParsedLine p;
  auto id = rec.find("id");
  if (id == rec.end() || id->is_null()) {
    p.item.id = line_no;
  } else if (id->is_string() || id->is_number()) {
    p.item.id = *id;
  } else {
    throw Error(where + ": \"id\" must be a string or a number, got " + std::string(id->type_name()), kBadHint);
  }
  auto prompt = rec.find("prompt");
  auto prompt_ids = rec.find("prompt_ids");
  auto messages = rec.find("messages");
  std::vector<int32_t>& ids = p.item.request.prompt_ids;
  const bool has_prompt = (prompt != rec.end() && !prompt->is_null()) || (prompt_ids != rec.end() && !prompt_ids->is_null());
  if (messages != rec.end() && !messages->is_null()) {
    if (has_prompt)
      throw Error(where + ": both \"messages\" and \"prompt\"/\"prompt_ids\"; a record has one of them", kBadHint);
    p.prompt_text = render_messages(*messages, where, chat);
    ids = tok.encode(p.prompt_text, false);  // the template wrote BOS where the model wants it
  } else if (prompt_ids != rec.end() && !prompt_ids->is_null()) {
    if (!prompt_ids->is_array()) throw Error(where + ": \"prompt_ids\" must be a list of token ids", kBadHint);
    const int32_t last_id = static_cast<int32_t>(std::min<int64_t>(tok.vocab_size(), kIntMax) - 1);
    for (size_t i = 0; i < prompt_ids->size(); ++i)
      ids.push_back(json_integer<int32_t>((*prompt_ids)[i], 0, last_id, where, "prompt_ids[" + std::to_string(i) + "]",
                                          kBadHint));
    p.prompt_text = tok.decode(ids);
  } else if (prompt != rec.end() && prompt->is_string()) {
    p.prompt_text = prompt->get<std::string>();
    ids = tok.encode(p.prompt_text, true);
  } else if (prompt != rec.end()) {
    throw Error(where + ": \"prompt\" must be a string, got " + std::string(prompt->type_name()), kBadHint);
  } else {
    throw Error(where + ": no \"prompt\" (string), \"prompt_ids\" (list) or \"messages\" (list)", kBadHint);
  }
  if (ids.empty()) {
    if (tok.bos_id() < 0) throw Error(where + ": the prompt is empty and the tokenizer has no BOS token", kBadHint);
    ids.push_back(tok.bos_id());
  }
  SamplingParams& sp = p.item.request.params;
  sp = defaults;
  read_integer(rec, "max_new_tokens", sp.max_new_tokens, 0, kIntMax, where);
  read_integer(rec, "min_new_tokens", sp.min_new_tokens, 0, kIntMax, where);
  read_param(rec, "temperature", sp.temperature, where);
  read_integer(rec, "top_k", sp.top_k, 0, kIntMax, where);
  read_param(rec, "top_p", sp.top_p, where);
  read_param(rec, "min_p", sp.min_p, where);
  read_param(rec, "repetition_penalty", sp.repetition_penalty, where);
  read_integer(rec, "seed", sp.seed, uint64_t{0}, std::numeric_limits<uint64_t>::max(), where);
  read_param(rec, "ignore_eos", sp.ignore_eos, where);
  auto stop = rec.find("stop");
  if (stop != rec.end() && !stop->is_null()) {
    sp.stop.clear();
    if (stop->is_string()) {
      if (stop->get<std::string>().empty()) throw Error(where + ": \"stop\" is an empty string", kBadHint);
      sp.stop.push_back(stop->get<std::string>());
    } else if (stop->is_array()) {
      for (const auto& s : *stop) {
        if (!s.is_string()) throw Error(where + ": \"stop\" must be a string or a list of strings", kBadHint);
        if (s.get<std::string>().empty()) throw Error(where + ": \"stop\" holds an empty string", kBadHint);
        sp.stop.push_back(s.get<std::string>());
      }
    } else {
      throw Error(where + ": \"stop\" must be a string or a list of strings", kBadHint);
    }
  }
  return p;
}

}  // namespace

namespace {

/// The batch job of generate --input: its output file and result fields.
BatchJobOptions generate_job(const std::string& output_path) {
  BatchJobOptions job;
  job.label = "generate";
  job.output_path = output_path;
  job.result_keys = {"text", "output_ids", "finish_reason"};
  return job;
}

}  // namespace

JsonlChat load_jsonl_chat(const std::string& model_dir, const std::string& template_file,
                          std::unique_ptr<ChatTemplate>& holder) {
  JsonlChat chat;
  try {
    holder = std::make_unique<ChatTemplate>(load_chat_template(model_dir, template_file));
    chat.tmpl = holder.get();
  } catch (const Error& e) {
    if (!template_file.empty()) throw;  // an explicit --chat-template must load
    chat.missing = e.what();
  }
  return chat;
}

std::vector<std::string> check_generate_output(const JsonlRequests& requests, const std::string& output_path,
                                               const Manifest& manifest, const std::string& model_dir) {
  const BatchJobOptions job = generate_job(output_path);
  check_output_not_locked(output_path);
  JsonlContents existing;
  std::vector<std::string> keys = check_batch_output(requests.items, job, &manifest, model_dir, &existing);
  if (!all_results_present(keys, existing)) keys.clear();
  return keys;
}

void run_generate_jsonl(RankContext& ctx, const std::string& input_path, const std::string& output_path,
                        const SamplingParams& defaults, int batch_size) {
  run_generate_jsonl(ctx, input_path, output_path, defaults, batch_size, GenerateJsonlOptions{});
}

JsonlRequests read_generate_jsonl(const std::string& input_path, const Tokenizer& tokenizer,
                                  const SamplingParams& defaults, int64_t max_seq_len, int64_t model_seq_limit,
                                  BadRecordPolicy policy, bool print, const JsonlChat& chat) {
  std::ifstream in(input_path, std::ios::binary);
  if (!in) throw Error(input_path + ": cannot open the prompts file", "check the path given to --input");
  JsonlRequests out;
  std::unordered_set<std::string> keys;
  std::unordered_set<std::string> warned_keys;
  std::string line;
  size_t line_no = 0;
  while (getline_bounded(in, line, input_path, line_no + 1)) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = input_path + ":" + std::to_string(line_no);
    try {
      json rec = parse_jsonl_line(line, where, kBadHint);
      warn_unknown_keys(rec, where, warned_keys, print);
      ParsedLine p = parse_line(rec, line_no, where, tokenizer, defaults, chat);
      if (max_seq_len > 0) check_request(p.item.request, max_seq_len, where, model_seq_limit);  // now, not hours in
      if (!keys.insert(id_key(p.item.id)).second)
        throw Error(where + ": duplicate id " + id_key(p.item.id), "ids must be unique for resuming; fix the input");
      p.item.expect = {{"prompt", p.prompt_text}};
      out.items.push_back(std::move(p.item));
      out.prompts.push_back(std::move(p.prompt_text));
    } catch (const Error& e) {
      if (policy == BadRecordPolicy::Stop) throw;
      ++out.skipped;
      if (print) std::fprintf(stderr, "warning: %s (skipped)\n", e.what());
    }
  }
  return out;
}

void run_generate_jsonl(RankContext& ctx, const std::string& input_path, const std::string& output_path,
                        const SamplingParams& defaults, int batch_size, const GenerateJsonlOptions& options) {
  TPS_CHECK(ctx.tokenizer != nullptr, "generate --input: rank context has no tokenizer", "open the model first");
  TPS_CHECK(input_path != output_path, input_path + ": --input and --output are the same file",
            "write the results to another file");
  const bool print = ctx.is_output_rank() && options.warn_skipped;
  std::unique_ptr<ChatTemplate> chat_holder;
  const JsonlChat chat = load_jsonl_chat(ctx.model_dir, options.chat_template_file, chat_holder);
  JsonlRequests req = read_generate_jsonl(input_path, *ctx.tokenizer, defaults, ctx.runner ? ctx.runner->max_seq_len() : 0,
                                          ctx.runner ? model_position_limit(ctx.runner->config()) : 0,
                                          options.on_bad_record, print, chat);
  std::vector<BatchItem>& items = req.items;
  const std::vector<std::string>& prompts = req.prompts;
  const size_t skipped = req.skipped;
  if (items.empty() && ctx.is_output_rank())
    std::fprintf(stderr, "warning: %s: no prompt to generate for\n", input_path.c_str());

  BatchJobOptions job = generate_job(output_path);
  job.batch_size = batch_size;
  job.progress_interval_s = options.progress_interval_s;
  BatchJobReport r = run_batch_job(ctx, items, job, [&](size_t i, const GenerationResult& res) {
    nlohmann::ordered_json out;
    out["prompt"] = prompts[i];
    out["text"] = res.text;
    out["output_ids"] = res.output_ids;
    out["finish_reason"] = res.finish_reason;
    out["prompt_tokens"] = items[i].request.prompt_ids.size();
    return out;
  });
  if (ctx.is_output_rank()) {
    std::fprintf(stderr, "generate: %zu prompts (%zu done before, %zu skipped as bad), %lld tokens in %.2f s (%.1f tok/s) -> %s\n",
                 r.total, r.already_done, skipped, static_cast<long long>(r.output_tokens), r.wall_s,
                 r.wall_s > 0 ? static_cast<double>(r.output_tokens) / r.wall_s : 0.0, output_path.c_str());
  }
}

}  // namespace tpshard::eval
