// commands.h: the tprun subcommands. main.cpp parses the global options and registers each
// subcommand; each cmd_*.cpp owns one subcommand's options, its preflight checks and its run function.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "format/error.h"
#include "runtime/session.h"

namespace tpshard::tprun {

/// Options before the subcommand: MODEL_DIR --tp N --device cpu|cuda|auto --max-batch --max-seq-len ...
struct GlobalOptions {
  SessionOptions session;
  /// Checks that need no model (option combinations, input files readable, output directories
  /// writable). main runs them all once parsing is done, before any worker starts or weights load;
  /// each returns at once unless its own subcommand was the one parsed. Throw UsageError for a missing
  /// or conflicting option (exit 2), tpshard::Error for anything else (exit 1).
  std::vector<std::function<void()>> preflight;
  /// True in the one process that speaks for the job: the process the user started (launcher or
  /// single process), or rank 0 when an external launcher (mpirun, srun, torchrun) started every rank.
  /// Notices printed by preflight checks are printed only here, so they appear once.
  bool primary_process = true;
  /// True in a worker started by the tprun launcher, which already ran the preflight checks that read
  /// the model (tokenizer, every request): the worker skips those (they would only repeat the work).
  bool checked_by_launcher = false;
  /// True for a job that writes its results to a file and resumes when rerun (generate --input/--output,
  /// eval): set by its preflight check; the Ctrl-C message says so only then.
  bool resumable_job = false;
};

void add_generate_command(CLI::App& app, GlobalOptions& g);    // cmd_generate.cpp  (generate, chat)
void add_tokenize_commands(CLI::App& app, GlobalOptions& g);   // cmd_tokenize.cpp  (tokenize, detokenize)
void add_logits_command(CLI::App& app, GlobalOptions& g);      // cmd_logits.cpp
void add_eval_command(CLI::App& app, GlobalOptions& g);        // cmd_eval.cpp      (eval triviaqa)
void add_serve_command(CLI::App& app, GlobalOptions& g);       // cmd_serve.cpp     (OpenAI-compatible server)
void add_bench_load_command(CLI::App& app, GlobalOptions& g);  // cmd_bench_load.cpp (CUDA builds;
                                                               // main.cpp registers a stub otherwise)

/// A usage error tprun finds itself, after CLI11 parsed the line: an option missing for what was asked
/// (`generate` without --prompt or --input) or options that conflict (--input without --output,
/// --min-new-tokens above --max-new-tokens). main prints it as any Error and exits 2, as for CLI11's
/// usage errors. Errors about what an input holds (a missing file, a bad JSONL line, a too-long
/// prompt) are plain Errors: exit 1.
/// Thrown by a preflight check that found the job already complete (every result in its output file):
/// tprun exits 0 without loading.
struct JobAlreadyDone {};

class UsageError : public Error {
 public:
  using Error::Error;
};

/// Throws UsageError(what, hint) when cond is false.
inline void check_usage(bool cond, const std::string& what, const std::string& hint) {
  if (!cond) throw UsageError(what, hint);
}

/// The token ids of a comma-separated list ("1,15043,3186"; spaces around an item are ignored).
/// Throws UsageError (exit 2) naming `label` ("logits --ids"): for an empty list, an empty item ("1,,2",
/// "1,") and an item that is not an integer in 0..2^31-1.
inline std::vector<int32_t> parse_token_ids(const std::string& s, const std::string& label) {
  const std::string hint = "pass comma-separated ids, e.g. --ids 1,15043,3186";
  check_usage(s.find_first_not_of(' ') != std::string::npos, label + ": no ids given", hint);
  std::vector<int32_t> ids;
  for (std::size_t start = 0;;) {
    const std::size_t comma = s.find(',', start);
    std::string item = s.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    while (!item.empty() && item.front() == ' ') item.erase(item.begin());
    while (!item.empty() && item.back() == ' ') item.pop_back();
    check_usage(!item.empty(), label + ": has an empty item in '" + s + "'", hint);
    std::size_t used = 0;
    long long v = -1;
    try {
      v = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    check_usage(used == item.size() && v >= 0 && v <= INT32_MAX,
                label + ": \"" + item + "\" is not a token id (an integer in 0.." + std::to_string(INT32_MAX) + ")",
                hint);
    ids.push_back(static_cast<int32_t>(v));
    if (comma == std::string::npos) return ids;
    start = comma + 1;
  }
}

/// bench-load where it cannot run. It measures loading shards into GPU memory, so it needs a CUDA build
/// and a visible GPU; the CPU backend has no bench-load. why: what is missing here.
[[noreturn]] inline void throw_bench_load_needs_gpu(const std::string& why) {
  throw Error("bench-load measures loading the shards into GPU memory and needs a CUDA device: " + why,
              "run it on a machine with an NVIDIA GPU and a CUDA build of tprun; without a GPU, `tpshard plan MODEL "
              "--tp N` shows the memory per GPU and `tprun MODEL --device cpu generate ...` ends with the weights, "
              "kv_cache and peak RSS per rank");
}

}  // namespace tpshard::tprun
