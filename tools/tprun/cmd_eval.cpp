// cmd_eval.cpp: `tprun MODEL_DIR eval triviaqa --data FILE ...`: few-shot TriviaQA EM/F1 as a resumable
// batch job. Owns: option parsing, the checks that run before loading (data readable, outputs writable)
// and the notice naming the files it writes; the job is eval/triviaqa_eval.h (formats in docs/EVAL.md).
#include <sys/stat.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include "common/log.h"
#include "tools/cli_validators.h"
#include "eval/triviaqa_eval.h"
#include "format/error.h"
#include "tools/tprun/commands.h"
#include "runtime/launcher.h"
#include "tools/tprun/preflight_model.h"

namespace tpshard::tprun {

namespace {

std::string absolute(const std::string& path) { return std::filesystem::absolute(path).lexically_normal().string(); }

/// The predictions and summary files of a run, defaults resolved as the job resolves them.
struct TriviaQaFiles {
  bool default_output;  ///< --output not given
  std::string output, summary;
  explicit TriviaQaFiles(const eval::TriviaQaOptions& o)
      : default_output(o.output_path.empty()),
        output(default_output ? eval::default_predictions_path(o.data_path) : o.output_path),
        summary(o.summary_path.empty() ? output + ".summary.json" : o.summary_path) {}
};

/// Before loading: --data / --shots-from readable, the predictions and summary files writable, and not
/// the same file.
void check_triviaqa_options(const eval::TriviaQaOptions& o) {
  cli::check_input_file("eval triviaqa --data", o.data_path);
  if (!o.shots_from.empty()) cli::check_input_file("eval triviaqa --shots-from", o.shots_from);
  const TriviaQaFiles f(o);
  const std::string& output = f.output;
  const std::string& summary = f.summary;
  cli::check_output_file(f.default_output
                             ? "eval triviaqa: predictions file (default, as --output is not given)"
                             : "eval triviaqa --output",
                         output, "--output");
  cli::check_output_file(o.summary_path.empty() ? "eval triviaqa: summary file (default: OUTPUT.summary.json)"
                                                : "eval triviaqa --summary",
                         summary, o.summary_path.empty() ? "--output or --summary" : "--summary");
  cli::check_distinct_files("eval triviaqa", {{"--data", o.data_path}, {"--shots-from", o.shots_from}},
                            {{"--output", output}, {"--summary", summary}});
}

/// One stderr line naming the predictions and summary files, and a second one when the predictions file
/// exists, since its questions are then reused, not generated. Printed after every preflight check
/// passed, so that a refused run prints only its error.
void print_triviaqa_notice(const eval::TriviaQaOptions& o) {
  const TriviaQaFiles f(o);
  const std::string& output = f.output;
  log_line(LogLevel::Info, "tprun: eval triviaqa: predictions -> %s%s, summary -> %s\n", absolute(output).c_str(),
               f.default_output
                   ? " (default: DATA_STEM.predictions.jsonl in the current directory; --output to choose)"
                   : "",
               absolute(f.summary).c_str());
  struct stat st {};
  if (::stat(output.c_str(), &st) == 0 && st.st_size > 0)
    log_line(LogLevel::Info,
                 "tprun: eval triviaqa: %s exists: questions already in it are scored from it, not generated again "
                 "(resume); delete it or pass another --output for a fresh run (e.g. another model or settings)\n",
                 output.c_str());
}

}  // namespace

void add_eval_command(CLI::App& app, GlobalOptions& g) {
  CLI::App* eval_cmd = app.add_subcommand("eval", "evaluation jobs (resumable: rerun the same command to finish)");
  eval_cmd->require_subcommand(1);

  auto o = std::make_shared<eval::TriviaQaOptions>();
  auto bad = std::make_shared<std::string>("stop");
  CLI::App* tqa = eval_cmd->add_subcommand("triviaqa", "few-shot closed-book TriviaQA: exact match and F1 "
                                                       "(official normalization, best over aliases)");
  tqa->add_option("--data", o->data_path,
                  "questions: HF rc.nocontext JSON/JSONL, the original {\"Data\": [...]} JSON, or llm-foundry JSONL")
      ->required();
  tqa->add_option("--shots", o->shots, "few-shot examples in the prompt (default 5)")
      ->check(tpshard::cli::non_negative_for(o->shots));
  tqa->add_option("--shots-from", o->shots_from,
                  "take the shots from this file's first records (default: the first records of --data, "
                  "which are then not scored)");
  tqa->add_option("--max-new-tokens", o->max_new_tokens, "tokens generated per answer at most (default 10)")
      ->check(tpshard::cli::positive_for(o->max_new_tokens));
  tqa->add_option(
         "--batch-size", o->batch_size,
         "questions per batch and per durable write (default 48; --max-batch sets how many decode together)")
      ->check(tpshard::cli::positive_for(o->batch_size));
  tqa->add_option("--limit", o->limit, "score only the first N questions (after the shots)")
      ->check(tpshard::cli::integer_in_range(1, INT64_MAX, "a run scores at least one question"));
  tqa->add_option("--output", o->output_path, "predictions JSONL (default: DATA_STEM.predictions.jsonl)");
  tqa->add_option("--summary", o->summary_path, "summary JSON (default: OUTPUT.summary.json)");
  tqa->add_option("--temperature", o->sampling.temperature, "0 = greedy (default)")
      ->check(tpshard::cli::non_negative_for(o->sampling.temperature));
  tqa->add_option("--top-k", o->sampling.top_k, "keep the k most likely tokens (0 = off)")
      ->check(tpshard::cli::non_negative_for(o->sampling.top_k));
  tqa->add_option("--top-p", o->sampling.top_p, "nucleus sampling mass (1 = off)")->check(tpshard::cli::fraction(false));
  tqa->add_option("--seed", o->sampling.seed, "sampling seed (default 0, so runs repeat exactly)")->check(tpshard::cli::uint64_value());
  tqa->add_option("--on-bad-record", *bad, "malformed record: stop (default) or skip with a warning")
      ->check(CLI::IsMember({"stop", "skip"}));
  tqa->add_option("--progress-interval", o->progress_interval_s,
                  "seconds between progress lines when stderr is not a terminal (default 10)")
      ->check(tpshard::cli::positive_for(o->progress_interval_s));
  g.preflight.push_back([tqa, o, bad, &g] {
    if (!tqa->parsed()) return;
    check_triviaqa_options(*o);
    g.resumable_job = true;
    if (!g.checked_by_launcher) {
      // Records, --shots and prompt lengths, as the job checks them (bad records reported here, not again).
      const PreflightModel m = load_preflight_model_with_tokenizer(g.session);
      eval::TriviaQaOptions checked = *o;
      checked.on_bad_record = eval::parse_bad_record_policy(*bad);
      checked.model_dir = g.session.model_dir;
      const std::vector<std::string> complete = eval::check_triviaqa_inputs(
          checked, *m.tokenizer, m.max_seq_len, m.model_seq_limit, g.primary_process, &m.manifest);
      // Only in the process the user started (alone or as tprun's launcher): ranks started by mpirun / srun /
      // torchrun each run this check, and one of them stopping alone would leave the others waiting.
      if (!complete.empty() && !read_worker_env().found) {
        log_line(LogLevel::Info, "tprun: eval triviaqa: %s already holds the predictions of all %zu questions: "
                 "scored from it (no weights loaded)\n", TriviaQaFiles(*o).output.c_str(), complete.size());
        eval::finish_complete_triviaqa(checked, complete, g.session.tp_size);
        throw JobAlreadyDone{};
      }
    }
    if (g.primary_process) print_triviaqa_notice(*o);
  });
  tqa->callback([&g, o, bad] {
    o->on_bad_record = eval::parse_bad_record_policy(*bad);
    o->warn_skipped = false;  // the preflight reported them before loading
    o->model_dir = g.session.model_dir;
    run_on_ranks(g.session, [&](RankContext& ctx) {
      if (ctx.tokenizer == nullptr) throw no_tokenizer_error(g.session.model_dir);
      eval::run_triviaqa_eval(ctx, *o);
    });
  });
}

}  // namespace tpshard::tprun
