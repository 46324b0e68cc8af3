// triviaqa_eval.cpp: few-shot TriviaQA as a resumable batch job, plus scoring of predictions files.
#include "eval/triviaqa_eval.h"

#include <chrono>
#include <cstdio>
#include <fstream>
#include <set>
#include <string>
#include <unordered_set>

#include "eval/answer_normalize.h"
#include "eval/batch_job.h"
#include "eval/fewshot_prompt.h"
#include "eval/resumable_jsonl.h"
#include "format/error.h"

namespace tpshard::eval {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;

void print_warnings(bool print, const std::vector<std::string>& warnings) {
  if (!print) return;
  for (const auto& w : warnings) std::fprintf(stderr, "warning: %s\n", w.c_str());
}

void write_text_file(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) throw Error(path + ": cannot write the summary file", "check the directory exists and is writable");
  f << text;
  if (!f.flush()) throw Error(path + ": write failed", "check free disk space");
}

}  // namespace

std::string default_predictions_path(const std::string& data_path) {
  const size_t slash = data_path.find_last_of('/');
  std::string base = slash == std::string::npos ? data_path : data_path.substr(slash + 1);
  // Only the .jsonl / .json extension goes: "validation.hf.jsonl" and "validation.lf.jsonl" must not
  // share a predictions file.
  for (const std::string ext : {".jsonl", ".json"}) {
    if (base.size() >= ext.size() && base.compare(base.size() - ext.size(), ext.size(), ext) == 0) {
      base.resize(base.size() - ext.size());
      break;
    }
  }
  if (base.empty()) base = "triviaqa";
  return base + ".predictions.jsonl";
}

PredictionScores score_predictions_file(const std::string& path, const std::vector<std::string>& ids) {
  std::unordered_set<std::string> wanted(ids.begin(), ids.end());
  JsonlContents c = read_jsonl_results(path);
  PredictionScores s;
  double em = 0, f1 = 0;
  std::unordered_set<std::string> seen;
  for (size_t i = 0; i < c.lines.size(); ++i) {
    if (!wanted.empty() && wanted.count(c.keys[i]) == 0) continue;
    if (!seen.insert(c.keys[i]).second) continue;  // an id written twice counts once (first line)
    json j = json::parse(c.lines[i]);
    auto pred = j.find("prediction");
    auto answers = j.find("answers");
    if (pred == j.end() || !pred->is_string() || answers == j.end() || !answers->is_array())
      throw Error(path + ": the line with id " + c.keys[i] + " has no \"prediction\" string or \"answers\" list",
                  "this is not a TriviaQA predictions file written by tprun eval");
    AnswerScore a = score_answer(pred->get<std::string>(), answers->get<std::vector<std::string>>());
    em += a.exact_match;
    f1 += a.f1;
    ++s.n;
  }
  if (s.n > 0) {
    s.exact_match = em / static_cast<double>(s.n);
    s.f1 = f1 / static_cast<double>(s.n);
  }
  return s;
}

namespace {

struct QuestionSet {
  std::vector<TriviaQaRecord> shots;
  std::vector<TriviaQaRecord> scored;
  size_t skipped_records = 0;
};

// Shots from --shots-from, or the first records of --data (then not scored); then --limit.
QuestionSet load_questions(bool print, const TriviaQaOptions& opts) {
  TPS_CHECK(opts.shots >= 0, "--shots " + std::to_string(opts.shots) + " is negative", "use 0 or more shots");
  QuestionSet q;
  TriviaQaLoadResult data = load_triviaqa(opts.data_path, opts.on_bad_record);
  print_warnings(print, data.warnings);
  q.skipped_records = data.warnings.size();
  const size_t n_shots = static_cast<size_t>(opts.shots);
  const auto shots_end = static_cast<std::ptrdiff_t>(n_shots);
  if (!opts.shots_from.empty()) {
    TriviaQaLoadResult shot_data = load_triviaqa(opts.shots_from, opts.on_bad_record);
    print_warnings(print, shot_data.warnings);
    TPS_CHECK(shot_data.records.size() >= n_shots,
              opts.shots_from + ": holds " + std::to_string(shot_data.records.size()) + " records, fewer than --shots " +
                  std::to_string(opts.shots),
              "lower --shots or give a larger --shots-from file");
    q.shots.assign(shot_data.records.begin(), shot_data.records.begin() + shots_end);
    q.scored = std::move(data.records);
    // a shot that is also a scored question puts its answer in that question's prompt
    std::set<std::string> shot_ids;
    for (const TriviaQaRecord& s : q.shots) shot_ids.insert(s.id);
    for (const TriviaQaRecord& r : q.scored)
      TPS_CHECK(!shot_ids.count(r.id),
                opts.shots_from + ": its shot " + r.id + " is also a question of " + opts.data_path +
                    " to score (its answer would be in the prompt)",
                "give --shots-from a file of other questions, or leave --shots-from out (the first --shots records of "
                "--data are then the shots and are not scored)");
  } else {
    TPS_CHECK(data.records.size() > n_shots,
              opts.data_path + ": holds " + std::to_string(data.records.size()) + " records; --shots " +
                  std::to_string(opts.shots) + " takes the first ones as shots and leaves none to score",
              "lower --shots or give the shots with --shots-from");
    q.shots.assign(data.records.begin(), data.records.begin() + shots_end);
    q.scored.assign(data.records.begin() + shots_end, data.records.end());
  }
  if (opts.limit >= 0 && q.scored.size() > static_cast<size_t>(opts.limit))
    q.scored.resize(static_cast<size_t>(opts.limit));
  return q;
}

/// One batch item per scored question: its few-shot prompt, greedy/--temperature sampling, stop at "\n".
std::vector<BatchItem> build_items(const QuestionSet& q, const TriviaQaOptions& opts, const Tokenizer& tok) {
  SamplingParams params = opts.sampling;
  params.max_new_tokens = opts.max_new_tokens;
  params.stop = {"\n"};  // the answer ends at the first newline; nothing after it is scored
  std::vector<BatchItem> items(q.scored.size());
  for (size_t i = 0; i < q.scored.size(); ++i) {
    items[i].id = q.scored[i].id;
    items[i].request.prompt_ids = tok.encode(build_fewshot_prompt(q.shots, q.scored[i].question), true);
    items[i].request.params = params;
    items[i].expect = {{"question", q.scored[i].question}};
  }
  return items;
}

ordered_json summary_json(int tp_size, const TriviaQaOptions& opts, const TriviaQaSummary& s,
                          const std::string& output) {
  ordered_json j;
  j["task"] = "triviaqa";
  j["model"] = opts.model_dir;
  j["data"] = opts.data_path;
  j["predictions"] = output;
  j["n"] = s.scores.n;
  j["exact_match"] = s.scores.exact_match;
  j["f1"] = s.scores.f1;
  j["questions"] = s.questions;
  j["shots"] = opts.shots;
  j["shots_from"] = opts.shots_from.empty() ? opts.data_path + " (first records, not scored)" : opts.shots_from;
  j["max_new_tokens"] = opts.max_new_tokens;
  j["temperature"] = opts.sampling.temperature;
  j["top_k"] = opts.sampling.top_k;
  j["top_p"] = opts.sampling.top_p;
  j["seed"] = opts.sampling.seed;
  j["tp_size"] = tp_size;
  j["skipped_records"] = s.skipped_records;
  j["already_done"] = s.already_done;
  j["generated"] = s.generated;
  j["output_tokens"] = s.output_tokens;
  j["tokens_per_s"] = s.generate_s > 0 ? static_cast<double>(s.output_tokens) / s.generate_s : 0.0;
  j["prompts_per_s"] = s.generate_s > 0 ? static_cast<double>(s.generated) / s.generate_s : 0.0;
  j["generate_s"] = s.generate_s;
  j["prefill_tokens"] = s.stats.prefill_tokens;
  j["shared_prefix_tokens"] = s.stats.shared_prefix_tokens;
  j["prefill_s"] = s.stats.prefill_seconds;
  j["decode_tokens"] = s.stats.decode_tokens;
  j["mixed_decode_tokens"] = s.stats.mixed_decode_tokens;
  j["decode_s"] = s.stats.decode_seconds;
  j["wall_s"] = s.wall_s;
  return j;
}

void print_summary(const TriviaQaOptions& opts, const TriviaQaSummary& s, const std::string& output,
                   const std::string& summary_path) {
  std::printf("triviaqa: n=%zu  EM=%.2f%%  F1=%.2f%%  (%d-shot, %zu generated now, %zu resumed)\n", s.scores.n,
              100.0 * s.scores.exact_match, 100.0 * s.scores.f1, opts.shots, s.generated, s.already_done);
  std::printf("triviaqa: %lld tokens in %.2f s: %.1f tok/s, %.2f prompts/s; wall %.2f s\n",
              static_cast<long long>(s.output_tokens), s.generate_s, s.json["tokens_per_s"].get<double>(),
              s.json["prompts_per_s"].get<double>(), s.wall_s);
  std::printf("triviaqa: prefill %lld tok computed (+%lld reused from shared prefixes) %.2f s | decode %lld tok %.2f s\n",
              static_cast<long long>(s.stats.prefill_tokens), static_cast<long long>(s.stats.shared_prefix_tokens),
              s.stats.prefill_seconds, static_cast<long long>(s.stats.decode_tokens), s.stats.decode_seconds);
  std::printf("triviaqa: predictions %s, summary %s\n", output.c_str(), summary_path.c_str());
  if (s.scores.n != s.questions)
    std::fprintf(stderr, "warning: %zu of %zu questions have a prediction\n", s.scores.n, s.questions);
  std::fflush(stdout);
}

/// The batch job of an eval: its output file (--output, or the default next to the data) and result fields.
BatchJobOptions triviaqa_job(const TriviaQaOptions& opts) {
  BatchJobOptions job;
  job.label = "triviaqa";
  job.output_path = opts.output_path.empty() ? default_predictions_path(opts.data_path) : opts.output_path;
  job.batch_size = opts.batch_size;
  job.progress_interval_s = opts.progress_interval_s;
  job.result_keys = {"prediction", "answers"};
  return job;
}

}  // namespace

std::vector<std::string> check_triviaqa_inputs(const TriviaQaOptions& opts, const Tokenizer& tokenizer, int64_t max_seq_len,
                           int64_t model_seq_limit, bool print, const Manifest* manifest) {
  const QuestionSet q = load_questions(print, opts);
  if (max_seq_len <= 0) return {};
  const std::vector<BatchItem> items = build_items(q, opts, tokenizer);
  std::vector<std::string> complete;
  if (manifest != nullptr) {  // an existing predictions file must be resumable by this job, and not being written
    const BatchJobOptions job = triviaqa_job(opts);
    check_output_not_locked(job.output_path);
    JsonlContents existing;
    complete = check_batch_output(items, job, manifest, opts.model_dir, &existing);
    if (!all_results_present(complete, existing)) complete.clear();
  }
  for (const BatchItem& item : items) {
    // The id run_batch_job gives the request (TriviaQA ids are strings), so the text matches the run's.
    const std::string id = item.id.is_string() ? item.id.get<std::string>() : id_key(item.id);
    try {
      check_request(item.request, max_seq_len, "request " + id, model_seq_limit);
    } catch (const Error& e) {
      // The user does not write these prompts: the way to shorten one is fewer shots (or fewer new tokens).
      const std::string hint = std::string(e.hint());
      if (std::string(e.what()).find(": prompt of ") == std::string::npos || opts.shots == 0) throw;
      const bool raise = hint.find("raise --max-seq-len") != std::string::npos;
      throw Error(std::string(e.what()) + " (the " + std::to_string(opts.shots) + "-shot prompt of this question)",
                  "lower --shots (each shot adds a question and its answer to every prompt)" +
                      std::string(hint.find("max_new_tokens") != std::string::npos ? " or --max-new-tokens" : "") +
                      (raise ? ", or raise --max-seq-len if it is below the model's max_position_embeddings" : ""));
    }
  }
  return complete;
}

TriviaQaSummary run_triviaqa_eval(RankContext& ctx, const TriviaQaOptions& opts) {
  const auto t0 = std::chrono::steady_clock::now();
  TPS_CHECK(ctx.tokenizer != nullptr, "eval triviaqa: rank context has no tokenizer", "open the model first");
  const QuestionSet q = load_questions(ctx.is_output_rank() && opts.warn_skipped, opts);
  TriviaQaSummary summary;
  summary.skipped_records = q.skipped_records;
  summary.questions = q.scored.size();

  const std::vector<BatchItem> items = build_items(q, opts, *ctx.tokenizer);
  std::vector<std::string> keys;
  for (const BatchItem& item : items) keys.push_back(id_key(item.id));

  const BatchJobOptions job = triviaqa_job(opts);
  const std::string& output = job.output_path;
  const std::string summary_path = opts.summary_path.empty() ? output + ".summary.json" : opts.summary_path;
  BatchJobReport r = run_batch_job(ctx, items, job, [&](size_t i, const GenerationResult& res) {
    const TriviaQaRecord& rec = q.scored[i];
    const std::string prediction = extract_answer(res.text);
    const AnswerScore s = score_answer(prediction, rec.ground_truths);
    ordered_json line;
    line["question"] = rec.question;
    line["prediction"] = prediction;
    line["answers"] = rec.ground_truths;
    line["exact_match"] = s.exact_match;
    line["f1"] = s.f1;
    line["output"] = res.text;
    line["finish_reason"] = res.finish_reason;
    line["prompt_tokens"] = items[i].request.prompt_ids.size();
    line["output_tokens"] = res.output_ids.size();
    return line;
  });
  summary.already_done = r.already_done;
  summary.generated = r.generated;
  summary.output_tokens = r.output_tokens;
  summary.generate_s = r.wall_s;
  summary.stats = r.stats;
  if (ctx.is_output_rank()) summary.scores = score_predictions_file(output, keys);
  summary.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!ctx.is_output_rank()) return summary;

  summary.json = summary_json(ctx.tp_size, opts, summary, output);
  write_text_file(summary_path, summary.json.dump(2) + "\n");
  print_summary(opts, summary, output, summary_path);
  return summary;
}

TriviaQaSummary finish_complete_triviaqa(const TriviaQaOptions& opts, const std::vector<std::string>& keys, int tp_size) {
  const auto t0 = std::chrono::steady_clock::now();
  const BatchJobOptions job = triviaqa_job(opts);
  const std::string& output = job.output_path;
  const std::string summary_path = opts.summary_path.empty() ? output + ".summary.json" : opts.summary_path;
  put_in_input_order(output, keys);
  TriviaQaSummary summary;
  summary.skipped_records = load_questions(false, opts).skipped_records;  // the preflight warned about them
  summary.questions = keys.size();
  summary.already_done = keys.size();
  summary.scores = score_predictions_file(output, keys);
  summary.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  summary.json = summary_json(tp_size, opts, summary, output);
  write_text_file(summary_path, summary.json.dump(2) + "\n");
  print_summary(opts, summary, output, summary_path);
  return summary;
}

}  // namespace tpshard::eval
