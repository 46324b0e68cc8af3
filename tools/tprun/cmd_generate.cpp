// cmd_generate.cpp: `tprun MODEL_DIR generate` (prompts from --prompt or a JSONL file) and
// `tprun MODEL_DIR chat` (one user turn rendered with the model's chat template). stdout gets only the
// generated text, streamed in prompt order (several prompts still run as one batch); labels and one
// summary line (tokens/s, memory per rank, peak RSS) go to stderr. Owns: option parsing, the checks
// that run before loading, and printing; generation is runtime/generate.h.
#include <sys/resource.h>

#include <cstdio>
#include <fstream>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/log.h"
#include "eval/generate_jsonl.h"
#include "format/error.h"
#include "format/json_depth.h"
#include "runtime/chat_template.h"
#include "runtime/generate.h"
#include "runtime/generation_defaults.h"
#include "runtime/launcher.h"
#include "runtime/process_memory.h"
#include "tools/cli_validators.h"
#include "tools/stdout_status.h"
#include "tools/tprun/commands.h"
#include "tools/tprun/preflight_model.h"

namespace tpshard::tprun {

namespace {

struct GenerateOptions {
  SamplingParams params;
  std::vector<std::string> prompts;
  std::string input, output;
  int batch_size = 0;
  std::string on_bad_record = "stop";  // JSONL only: stop | skip
  std::string system;  // chat only
  std::vector<std::string> chat_prompt;  // chat only: one user message (a second --prompt is refused by name)
  std::string messages_file;             // chat only: a conversation file
  std::string generation_config = "auto";  // auto | none (generation_defaults.h)
  bool json_stats = false;  // --json: the closing stats as one JSON object
  double progress_interval_s = 10;  // JSONL: the period of the progress lines in logs
  std::string chat_template_file;  // chat, and generate --input "messages" records: replaces the model's template
};

void add_sampling_options(CLI::App* sub, SamplingParams& p, std::string& generation_config) {
  sub->add_option("--generation-config", generation_config,
                  "auto: the model's generation_config.json sampling values are the defaults of the options not given "
                  "(as vLLM); none: ignore the file")
      ->check(CLI::IsMember({"auto", "none"}))
      ->default_str("auto");
  sub->add_option("--max-new-tokens", p.max_new_tokens,
                  "tokens to generate at most (default " + std::to_string(SamplingParams{}.max_new_tokens) +
                      ", or generation_config.json's max_new_tokens)")
      ->check(tpshard::cli::non_negative_for(p.max_new_tokens));
  sub->add_option("--min-new-tokens", p.min_new_tokens, "EOS is suppressed until this many tokens")
      ->check(tpshard::cli::non_negative_for(p.min_new_tokens));
  sub->add_option("--temperature", p.temperature, "0 = greedy (default)")
      ->check(tpshard::cli::non_negative_for(p.temperature));
  sub->add_option("--top-k", p.top_k, "keep the k most likely tokens (0 = off)")
      ->check(tpshard::cli::non_negative_for(p.top_k));
  sub->add_option("--top-p", p.top_p, "nucleus sampling mass (1 = off)")->check(tpshard::cli::fraction(false));
  sub->add_option("--min-p", p.min_p, "drop tokens below min_p * p_max (0 = off)")->check(tpshard::cli::fraction(true));
  sub->add_option("--repetition-penalty", p.repetition_penalty, "CTRL repetition penalty (1 = off)")
      ->check(tpshard::cli::positive_for(p.repetition_penalty));
  sub->add_option("--seed", p.seed,
                  "sampling seed (default 0, so runs repeat exactly; per request stream = f(seed, request id or index, step))")
      ->check(tpshard::cli::uint64_value());
  sub->add_option("--stop", p.stop, "stop string (repeatable); excluded from the output")
      ->check(tpshard::cli::non_empty_text());
  sub->add_flag("--ignore-eos", p.ignore_eos, "do not stop at EOS tokens");
}

/// With --generation-config auto, the model's generation_config.json values for the sampling options that
/// `sub` did not get (generation_defaults.h); the primary process names what was applied on stderr.
void apply_model_generation_defaults(const GlobalOptions& g, const CLI::App* sub, const std::string& mode,
                                     SamplingParams& p) {
  if (mode != "auto") return;
  std::set<std::string> given;
  for (const auto& [option, field] : {std::pair<const char*, const char*>{"--temperature", "temperature"},
                                      {"--top-p", "top_p"}, {"--top-k", "top_k"}, {"--min-p", "min_p"},
                                      {"--repetition-penalty", "repetition_penalty"},
                                      {"--max-new-tokens", "max_new_tokens"}})
    if (sub->get_option(option)->count() > 0) given.insert(field);
  const std::string applied = apply_generation_defaults(read_generation_defaults(g.session.model_dir), p, given);
  if (!applied.empty() && g.primary_process)
    log_line(LogLevel::Info, "tprun: generation_config.json: %s (the model's defaults; --generation-config none ignores them)\n",
             applied.c_str());
}

/// Sampling option combinations refused before loading (`cmd`: "generate", "chat"). Each value's own
/// range is checked by its CLI11 validator; JSONL lines are checked again per line (check_request).
void check_sampling_options(const std::string& cmd, const SamplingParams& p) {
  check_usage(p.min_new_tokens <= p.max_new_tokens,
              cmd + ": --min-new-tokens " + std::to_string(p.min_new_tokens) + " is greater than --max-new-tokens " +
                  std::to_string(p.max_new_tokens),
              "pass --min-new-tokens 0.." + std::to_string(p.max_new_tokens) + ", or a larger --max-new-tokens");
}

/// Token ids of a prompt; "" gives BOS only (the model's or the tokenizer's).
std::vector<int32_t> encode_prompt(const RankContext& ctx, const std::string& text, bool add_special) {
  std::vector<int32_t> ids = ctx.tokenizer->encode(text, add_special);
  if (!ids.empty()) return ids;
  if (ctx.tokenizer->bos_id() >= 0) return {ctx.tokenizer->bos_id()};
  const auto& bos = ctx.runner->config().bos_token_ids;
  TPS_CHECK(!bos.empty(), "empty prompt and the model has no BOS token", "give a non-empty --prompt");
  return {static_cast<int32_t>(bos.front())};
}

std::string mib(uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
  return buf;
}

/// The closing stats line on stderr; skipped when writing the generated text to stdout failed (main
/// then reports the failed write and exits 1, so a failed run never prints a success line). With `json`:
/// one JSON object instead (keys: prefill_tokens, prefill_seconds, prefill_tokens_per_s,
/// shared_prefix_tokens, decode_tokens, mixed_decode_tokens (of those, fed along with a prefill step and
/// timed there), decode_seconds, decode_tokens_per_s (decode steps' rows / decode_seconds), tp_size, device,
/// weight_bytes_per_rank, kv_cache_bytes_per_rank, peak_rss_bytes; byte counts of 0 when unknown).
void print_summary(const RankContext& ctx, const GenerationStats& s, bool json) {
  if (std::ferror(stdout)) return;  // the printer flushed every output
  const double prefill_rate = s.prefill_seconds > 0 ? s.prefill_tokens / s.prefill_seconds : 0;
  // Decode rows fed along with a prefill step are timed there: the rate counts the decode forwards' rows only.
  const double decode_rate = s.decode_seconds > 0 ? (s.decode_tokens - s.mixed_decode_tokens) / s.decode_seconds : 0;
  const uint64_t w = ctx.runner->weight_bytes(), kv = ctx.runner->kv_cache_bytes();
  if (json) {
    const nlohmann::json j = {{"prefill_tokens", s.prefill_tokens},   {"prefill_seconds", s.prefill_seconds},
                              {"prefill_tokens_per_s", prefill_rate}, {"shared_prefix_tokens", s.shared_prefix_tokens},
                              {"decode_tokens", s.decode_tokens},     {"mixed_decode_tokens", s.mixed_decode_tokens},
                              {"decode_seconds", s.decode_seconds},
                              {"decode_tokens_per_s", decode_rate},   {"tp_size", ctx.tp_size},
                              {"device", device_name(ctx.device)},    {"weight_bytes_per_rank", w},
                              {"kv_cache_bytes_per_rank", kv},        {"peak_rss_bytes", peak_rss_bytes()}};
    std::fprintf(stderr, "%s\n", j.dump().c_str());
    return;
  }
  log_line(LogLevel::Info,
               "tprun: prefill %lld tok %.3f s (%.1f tok/s) | decode %lld tok %.3f s (%.1f tok/s) | per rank "
               "(tp %d, %s): weights %s, kv_cache %s | peak RSS %s\n",
               static_cast<long long>(s.prefill_tokens), s.prefill_seconds, prefill_rate,
               static_cast<long long>(s.decode_tokens), s.decode_seconds, decode_rate, ctx.tp_size,
               device_name(ctx.device), w ? mib(w).c_str() : "n/a", kv ? mib(kv).c_str() : "n/a",
               mib(peak_rss_bytes()).c_str());
}

/// Prints the outputs of several prompts in prompt order while they run as one batch. The first
/// unfinished prompt streams; text of later prompts is held until every prompt before them is done,
/// then printed at once and streamed on. stdout gets only generated text, each output ended by one
/// newline; stderr gets `--- [i] ---` before output i and `--- [i] FINISH_REASON, N tokens ---` after it.
class OrderedPrinter {
 public:
  explicit OrderedPrinter(size_t n) : held_(n), done_(n) {}

  void on_text(size_t i, const std::string& piece) {
    start();
    if (i == current_) write_text(piece);
    else held_[i] += piece;
  }

  /// generate() streams all of a request's text (r.text) through on_text before calling this.
  void on_done(size_t i, const GenerationResult& r) {
    start();
    done_[i] = "--- [" + std::to_string(i) + "] " + r.finish_reason + ", " + std::to_string(r.output_ids.size()) +
               " tokens ---\n";
    while (current_ < done_.size() && !done_[current_].empty()) {
      std::fputc('\n', stdout);
      cli::flush_stdout();
      std::fputs(done_[current_].c_str(), stderr);
      if (++current_ < done_.size()) begin(current_);
    }
  }

 private:
  /// The first label waits for the first result, so an error before generation starts (prompt too
  /// long, ...) is not preceded by a dangling label.
  void start() {
    if (started_) return;
    started_ = true;
    begin(0);
  }

  void begin(size_t i) {
    std::fprintf(stderr, "--- [%zu] ---\n", i);
    write_text(held_[i]);
    held_[i] = std::string();
  }

  static void write_text(const std::string& piece) {
    std::fwrite(piece.data(), 1, piece.size(), stdout);
    cli::flush_stdout();  // before the next label on stderr, so a terminal shows both in order
  }

  std::vector<std::string> held_;  ///< text of prompts after current_, streamed but not printed yet
  std::vector<std::string> done_;  ///< the closing stderr label of each finished prompt; empty: running
  size_t current_ = 0;             ///< the prompt whose text goes straight to stdout
  bool started_ = false;
};

/// Generate for already-encoded prompts. One prompt: its text streams to stdout, then a newline. Several:
/// OrderedPrinter (each output as soon as it and every prompt before it are done).
void generate_and_print(RankContext& ctx, const std::vector<std::vector<int32_t>>& prompts, const SamplingParams& p,
                        bool json_stats) {
  std::vector<GenerationRequest> requests;
  for (size_t i = 0; i < prompts.size(); ++i) requests.push_back({std::to_string(i), prompts[i], p});
  const bool out = ctx.is_output_rank();
  const bool single = prompts.size() == 1;
  GenerateCallbacks cb;
  std::unique_ptr<OrderedPrinter> printer;
  if (out && single) {
    cb.on_text = [](size_t, const std::string& piece, const GenerationResult&) {
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      cli::flush_stdout();
    };
  } else if (out) {
    printer = std::make_unique<OrderedPrinter>(prompts.size());
    cb.on_text = [&printer](size_t i, const std::string& piece, const GenerationResult&) { printer->on_text(i, piece); };
    cb.on_done = [&printer](size_t i, const GenerationResult& r) { printer->on_done(i, r); };
  }
  GenerationStats stats;
  generate(*ctx.runner, *ctx.tokenizer, requests, cb, &stats);
  if (ctx.tp_rank == 0 && ctx.pp_size > 1) log_line(LogLevel::Info, "tprun: %s\n", ctx.runner->pipeline_report().c_str());
  if (!out) return;
  if (single) std::fputc('\n', stdout);
  cli::flush_stdout();
  print_summary(ctx, stats, json_stats);
}

void require_tokenizer(const RankContext& ctx) {
  if (ctx.tokenizer == nullptr) throw no_tokenizer_error(ctx.model_dir);
}

/// The checks of `generate` that need no model: option combinations, the JSONL input readable, the
/// output's directory writable. Run by main before anything loads.
void check_generate_options(const GenerateOptions& o) {
  check_sampling_options("generate", o.params);
  const bool jsonl = !o.input.empty() || !o.output.empty();
  if (!jsonl) {
    check_usage(!o.prompts.empty(), "generate: no prompt",
                "pass --prompt \"...\" (repeatable) or --input FILE --output FILE");
    return;
  }
  check_usage(!o.json_stats, "generate: --json is for --prompt runs (a JSONL job writes its results to --output)",
              "drop --json");
  check_usage(!o.input.empty() && !o.output.empty(), "generate: --input and --output go together",
              "pass both --input prompts.jsonl and --output out.jsonl");
  check_usage(o.prompts.empty(), "generate: --prompt cannot be combined with --input", "use one of them");
  cli::check_input_file("generate --input", o.input);
  cli::check_output_file("generate --output", o.output, "--output");
  cli::check_distinct_files("generate", {{"--input", o.input}}, {{"--output", o.output}});
}

/// The checks of `generate` that read the model but no weight (preflight_model.h): every prompt (or
/// JSONL line, as the job reads it) tokenized and checked with check_request, with the same error text
/// the run gives. --on-bad-record skip: bad lines are reported here (primary process) and not again.
void check_generate_requests(const GlobalOptions& g, const GenerateOptions& o) {
  const PreflightModel m = load_preflight_model_with_tokenizer(g.session);
  const bool jsonl = !o.input.empty();
  if (jsonl) {
    std::unique_ptr<ChatTemplate> chat_holder;
    const eval::JsonlChat chat = eval::load_jsonl_chat(g.session.model_dir, o.chat_template_file, chat_holder);
    const eval::JsonlRequests req = eval::read_generate_jsonl(o.input, *m.tokenizer, o.params, m.max_seq_len,
                                                              m.model_seq_limit,
                                                              eval::parse_bad_record_policy(o.on_bad_record),
                                                              g.primary_process, chat);
    // Nothing to run is a failed job, not a silent success (before any weight loads).
    TPS_CHECK(!req.items.empty(),
              o.input + ": no prompt to generate for: " +
                  (req.skipped > 0 ? "all " + std::to_string(req.skipped) + " records were skipped as bad (warnings above)"
                                   : std::string("the file has no records")),
              req.skipped > 0 ? "fix the records, or drop --on-bad-record skip to stop at the first bad one"
                              : "give one JSON object per line, e.g. {\"prompt\": \"Once upon a time\"}");
    const std::vector<std::string> complete = eval::check_generate_output(req, o.output, m.manifest, g.session.model_dir);
    // Only in the process the user started (alone or as tprun's launcher): ranks started by mpirun / srun /
    // torchrun each run this check, and one of them stopping alone would leave the others waiting.
    if (!complete.empty() && !read_worker_env().found) {
      eval::put_in_input_order(o.output, complete);
      log_line(LogLevel::Info, "generate: %s already holds the results of all %zu prompts of %s: nothing to generate (no "
               "weights loaded; the file is in input order)\n", o.output.c_str(), req.items.size(), o.input.c_str());
      throw JobAlreadyDone{};
    }
    return;
  }
  for (size_t i = 0; i < o.prompts.size(); ++i) {
    GenerationRequest r{std::to_string(i), m.tokenizer->encode(o.prompts[i], true), o.params};
    if (r.prompt_ids.empty() && m.tokenizer->bos_id() >= 0) r.prompt_ids = {m.tokenizer->bos_id()};
    if (r.prompt_ids.empty() && !m.manifest.model.bos_token_ids.empty())
      r.prompt_ids = {static_cast<int32_t>(m.manifest.model.bos_token_ids.front())};
    if (r.prompt_ids.empty()) continue;  // encode_prompt reports it in the run
    check_request(r, m.max_seq_len, "request " + r.id, m.model_seq_limit);  // as Generator::validate
  }
}

void run_generate(GlobalOptions& g, const GenerateOptions& o) {
  const bool jsonl = !o.input.empty() || !o.output.empty();  // options checked by check_generate_options
  run_on_ranks(g.session, [&](RankContext& ctx) {
    require_tokenizer(ctx);
    if (jsonl) {
      eval::GenerateJsonlOptions jo;
      jo.on_bad_record = eval::parse_bad_record_policy(o.on_bad_record);
      jo.warn_skipped = false;  // check_generate_requests reported them before loading
      jo.chat_template_file = o.chat_template_file;
      jo.progress_interval_s = o.progress_interval_s;
      eval::run_generate_jsonl(ctx, o.input, o.output, o.params,
                               o.batch_size > 0 ? o.batch_size : ctx.runner->max_batch(), jo);
      return;
    }
    std::vector<std::vector<int32_t>> prompts;
    for (const std::string& text : o.prompts) prompts.push_back(encode_prompt(ctx, text, true));
    generate_and_print(ctx, prompts, o.params, o.json_stats);
  });
}

/// The conversation of `chat --messages FILE`: a JSON list of {"role", "content"} (OpenAI's messages).
std::vector<ChatMessage> read_messages(const std::string& path) {
  std::ifstream f(path);
  TPS_CHECK(f.good(), "chat --messages: cannot open " + path, "pass a readable JSON file");
  std::stringstream ss;
  ss << f.rdbuf();
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(ss.str(), json_depth_guard(path));
  } catch (const nlohmann::json::exception& e) {
    throw Error(path + ": not valid JSON (" + std::string(e.what()) + ")", "write a list of {\"role\": ..., \"content\": ...}");
  }
  TPS_CHECK(j.is_array() && !j.empty(), path + ": expected a non-empty JSON list of messages",
            "write [{\"role\": \"user\", \"content\": \"...\"}, ...]");
  std::vector<ChatMessage> messages;
  for (size_t i = 0; i < j.size(); ++i) {
    const nlohmann::json& m = j[i];
    TPS_CHECK(m.is_object() && m.contains("role") && m["role"].is_string() && m.contains("content") && m["content"].is_string(),
              path + ": message " + std::to_string(i) + " needs string \"role\" and \"content\"",
              "write {\"role\": \"user\" | \"assistant\" | \"system\", \"content\": \"...\"}");
    messages.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
  }
  return messages;
}

void run_chat(GlobalOptions& g, const GenerateOptions& o) {
  std::vector<ChatMessage> messages;
  if (!o.system.empty()) messages.push_back({"system", o.system});
  if (!o.messages_file.empty()) {
    for (ChatMessage& m : read_messages(o.messages_file)) messages.push_back(std::move(m));
  } else {
    messages.push_back({"user", o.chat_prompt.at(0)});
  }
  const std::string rendered = render_chat(load_chat_template(g.session.model_dir, o.chat_template_file), messages, true);
  run_on_ranks(g.session, [&](RankContext& ctx) {
    require_tokenizer(ctx);
    // The template already spells out BOS etc., like HF apply_chat_template (add_special_tokens=False).
    generate_and_print(ctx, {encode_prompt(ctx, rendered, false)}, o.params, o.json_stats);
  });
}

}  // namespace

void add_generate_command(CLI::App& app, GlobalOptions& g) {
  auto o = std::make_shared<GenerateOptions>();
  CLI::App* gen = app.add_subcommand("generate", "generate text for prompts (batched, continuous batching)");
  gen->add_option("--prompt", o->prompts, "prompt text (repeat --prompt for several, run as one batch; \"\" = BOS only)")
      ->allow_extra_args(false);  // one text per --prompt: `--prompt Once upon` is refused, not two prompts
  gen->add_option("--input", o->input, "JSONL file of {\"id\", \"prompt\", optional sampling overrides}");
  gen->add_option("--output", o->output, "JSONL results (resumable: ids already there are skipped)");
  gen->add_option("--batch-size", o->batch_size, "JSONL: requests per batch (default --max-batch)")
      ->check(tpshard::cli::positive_for(o->batch_size));
  gen->add_option("--chat-template", o->chat_template_file,
                  "Jinja chat template file for --input records with \"messages\" (default: the model's own)");
  gen->add_option("--on-bad-record", o->on_bad_record, "JSONL: malformed input line: stop (default) or skip with a warning")
      ->check(CLI::IsMember({"stop", "skip"}));
  gen->add_option("--progress-interval", o->progress_interval_s,
                  "JSONL: seconds between progress lines when stderr is not a terminal (default 10)")
      ->check(tpshard::cli::positive_for(o->progress_interval_s));
  add_sampling_options(gen, o->params, o->generation_config);
  gen->add_flag("--json", o->json_stats, "--prompt: the closing stats line as one JSON object on stderr (machine-readable)");
  gen->callback([&g, o] { run_generate(g, *o); });
  g.preflight.push_back([gen, o, &g] {
    if (!gen->parsed()) return;
    apply_model_generation_defaults(g, gen, o->generation_config, o->params);
    check_generate_options(*o);
    g.resumable_job = !o->input.empty();
    if (!g.checked_by_launcher) check_generate_requests(g, *o);
  });

  auto c = std::make_shared<GenerateOptions>();
  CLI::App* chat = app.add_subcommand("chat", "answer a user message (or a conversation) through the model's chat template");
  auto* chat_prompt = chat->add_option("--prompt", c->chat_prompt, "the user message (one; --messages for a conversation)")
                          ->allow_extra_args(false);  // one value per --prompt, as a string option
  auto* messages = chat->add_option("--messages", c->messages_file,
                                    "JSON file: a list of {\"role\", \"content\"} (OpenAI messages); the reply continues it");
  chat_prompt->excludes(messages);
  chat->add_option("--system", c->system, "optional system message (before the conversation)");
  chat->add_option("--chat-template", c->chat_template_file,
                   "Jinja chat template file to use instead of the model's (chat_template.jinja / tokenizer_config.json)");
  add_sampling_options(chat, c->params, c->generation_config);
  chat->add_flag("--json", c->json_stats, "the closing stats line as one JSON object on stderr (machine-readable)");
  chat->callback([&g, c] { run_chat(g, *c); });
  g.preflight.push_back([chat, c, chat_prompt, messages, &g] {
    if (!chat->parsed()) return;
    check_usage(c->chat_prompt.size() <= 1,
                "chat: --prompt given " + std::to_string(c->chat_prompt.size()) + " times; chat answers one user message",
                "for a conversation, pass --messages FILE (a JSON list of {\"role\", \"content\"}); for independent "
                "prompts, `tprun MODEL generate --prompt A --prompt B`");
    check_usage(chat_prompt->count() + messages->count() >= 1, "chat: pass --prompt TEXT or --messages FILE",
                "tprun MODEL chat --prompt \"...\"");
    if (messages->count()) (void)read_messages(c->messages_file);  // a bad file is named before any weight loads
    apply_model_generation_defaults(g, chat, c->generation_config, c->params);
    if (!c->chat_template_file.empty()) cli::check_input_file("chat --chat-template", c->chat_template_file);
    check_sampling_options("chat", c->params);
    if (!g.checked_by_launcher) load_preflight_model_with_tokenizer(g.session);  // before any weight loads
    (void)load_chat_template(g.session.model_dir, c->chat_template_file);  // a template we cannot parse, before loading
  });
}

}  // namespace tpshard::tprun
