// main.cpp: the tprun command line. Reads like a table of contents: global options (model dir, tp,
// device, kv_cache size, multi-node rendezvous), one subcommand per cmd_*.cpp, the subcommands'
// preflight checks (before anything loads), the launcher hook (CUDA: start one worker per GPU, then
// wait), and the error convention: tpshard::Error -> "error: ...\nhint: ..." exit 1; usage errors (CLI11's
// and tprun's own UsageError: a missing or conflicting option) exit 2; --help / --version exit 0.
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <new>
#include <cstdio>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "common/log.h"
#include "tools/cli_subcommands.h"
#include "tools/cli_validators.h"
#include "tools/stdout_status.h"
#include "tools/version_text.h"
#include "model/manifest.h"
#include "format/error.h"
#include "runtime/launcher.h"
#include "runtime/session.h"
#include "runtime/tuning.h"
#include "tools/tprun/commands.h"

namespace {

/// Thrown from the parse-complete hook when this process was only the launcher of the workers.
struct ExitNow {
  int code;
};

/// Ctrl-C / SIGTERM in a process that runs the command itself, then exit 128 + signal as the default
/// action would. Only async-signal-safe calls.
/// Text streamed to stdout (generate --prompt, chat): end the streamed line; nothing is resumable.
void on_interrupt_streamed(int sig) {
  static const char kMsg[] = "\ntprun: interrupted\n";
  (void)!::write(STDOUT_FILENO, "\n", 1);
  (void)!::write(STDERR_FILENO, kMsg, sizeof(kMsg) - 1);
  ::_exit(128 + sig);
}
/// A job writing to files (generate --input/--output, eval): say what is kept and how to resume.
void on_interrupt_resumable(int sig) {
  static const char kMsg[] =
      "\ntprun: interrupted; results already written are kept, and rerunning the same command resumes the "
      "job\n";
  (void)!::write(STDERR_FILENO, kMsg, sizeof(kMsg) - 1);
  ::_exit(128 + sig);
}

tpshard::Device parse_device(const std::string& s) {
  if (s == "cpu") return tpshard::Device::Cpu;
  if (s == "cuda") return tpshard::Device::Cuda;
  return tpshard::Device::Auto;
}

#if !TPSHARD_HAVE_CUDA
/// Builds without CUDA: `bench-load` (with any of its options) says why it cannot run here, instead of
/// CLI11's "unexpected argument" or a launcher message.
void add_bench_load_unavailable(CLI::App& app, tpshard::tprun::GlobalOptions& g) {
  CLI::App* sub = app.add_subcommand(
      "bench-load", "CUDA builds only: load each rank's shard into GPU memory, report time, GB/s and memory");
  sub->allow_extras();  // its options belong to the CUDA build; the error below is the answer to any of them
  g.preflight.push_back([sub] {
    if (sub->parsed()) tpshard::tprun::throw_bench_load_needs_gpu("this tprun was built without the CUDA backend");
  });
}
#endif

/// --tp when it is not given: 1 when the model has that layout (at --pp), else its only tp size (named on
/// stderr); several and no tp 1: a usage error listing them. A directory without a readable manifest
/// keeps 1 (the session names the problem).
int default_tp_size(const std::string& model_dir, int pp_size, bool say) {
  tpshard::Manifest m;
  try {
    m = tpshard::load_manifest(model_dir);
  } catch (const std::exception&) {
    return 1;
  }
  std::vector<int> sizes;
  if (pp_size == 1) {
    for (const auto& kv : m.shards) sizes.push_back(kv.first);
  } else {
    for (const auto& kv : m.pp_shards)
      if (kv.first.first == pp_size) sizes.push_back(kv.first.second);
  }
  if (sizes.empty() || std::find(sizes.begin(), sizes.end(), 1) != sizes.end()) return 1;
  if (sizes.size() == 1) {
    if (say)
      tpshard::log_line(tpshard::LogLevel::Info, "tprun: --tp not given: using tp %d, the only tp size of %s%s\n", sizes[0],
                        model_dir.c_str(), pp_size > 1 ? (" at pp " + std::to_string(pp_size)).c_str() : "");
    return sizes[0];
  }
  std::string list;
  for (int t : sizes) list += (list.empty() ? "" : ", ") + std::to_string(t);
  throw tpshard::tprun::UsageError(model_dir + " has no tp 1 layout" + (pp_size > 1 ? " at pp " + std::to_string(pp_size) : std::string()) +
                       ", and several others (tp " + list + "): --tp is needed",
                   "pass --tp with one of " + list + " (" + tpshard::manifest_layouts_text(m) + ")");
}

}  // namespace

int main(int argc, char** argv) {
  using namespace tpshard::tprun;
  // A closed stdout (`tprun ... | head`) makes a write fail with EPIPE, reported as an error (exit 1, as
  // docs/RUNTIME.md says), instead of killing the process with SIGPIPE and no message. Inherited by the workers.
  ::signal(SIGPIPE, SIG_IGN);
  CLI::App app{"tprun: run a tpshard-converted model with tensor parallelism (CPU threads or CUDA + NCCL)"};
  app.formatter(std::make_shared<tpshard::cli::UsageFormatter>("tprun MODEL_DIR [OPTIONS]"));
  app.set_help_all_flag("--help-all", "help for every subcommand");
  app.set_version_flag("--version", tpshard::version_text(tpshard::backends_built_in()));
  GlobalOptions g;
  std::string device = "auto";
  bool no_verify = false;
  app.add_option("MODEL_DIR", g.session.model_dir, "converted model directory (tpshard convert output)")
      ->required();
  app.add_option("--tp", g.session.tp_size, "tensor-parallel size (one of those in the manifest)")
      ->check(tpshard::cli::positive_for(g.session.tp_size));
  app.add_option("--pp", g.session.pp_size, "pipeline stages (a layout converted with tpshard convert --pp)")
      ->check(tpshard::cli::positive_for(g.session.pp_size));
  app.add_option("--dp", g.session.dp_size,
                 "data-parallel replicas: eval / generate --input split their items over them")
      ->check(tpshard::cli::positive_for(g.session.dp_size));
  app.add_option("--micro-batches", g.session.micro_batches, "pipeline micro-batches per step (default 2 x --pp)")
      ->check(tpshard::cli::positive_for(g.session.micro_batches));
  app.add_option("--device", device, "cpu, cuda or auto (cuda when built with it and a GPU is visible)")
      ->check(CLI::IsMember({"cpu", "cuda", "auto"}));
  app.add_option("--max-batch", g.session.max_batch,
                 "kv_cache slots (sequences decoded together; default: CUDA as many as fit in --gpu-memory-utilization, "
                 "at most 256; CPU 8)")
      ->check(tpshard::cli::positive_for(g.session.max_batch));
  app.add_option("--gpu-memory-utilization", g.session.gpu_memory_utilization,
                 "CUDA: fraction of each GPU's memory the job may hold when --max-batch is not given (default 0.9)")
      ->check(CLI::Range(0.05, 1.0));
  app.add_option("--max-seq-len", g.session.max_seq_len,
                 "positions per kv_cache slot (default: min(max_position_embeddings, 2048))")
      ->check(tpshard::cli::positive_for(g.session.max_seq_len));
  app.add_option("--threads", g.session.cpu_threads, "CPU: threads per rank (default: cores / tp)")
      ->check(tpshard::cli::cpu_threads_per_rank());
  app.add_flag("--no-verify", no_verify, "skip the per-tensor XXH3 check while loading");
  app.add_option("--nnodes", g.session.nnodes, "number of nodes (one tprun each, or one task each under srun/mpirun)")
      ->check(tpshard::cli::positive_for(g.session.nnodes));
  app.add_option("--node-rank", g.session.node_rank, "index of this node")
      ->check(tpshard::cli::non_negative_for(g.session.node_rank));
  app.add_option("--master-addr", g.session.master_addr, "HOST:PORT of the rendezvous on node 0");
  app.add_flag("--cpu-processes", g.session.cpu_processes,
               "CPU: one process per rank (collectives over gloo), as the CUDA backend runs; default: threads");
  bool quiet = false, verbose = false;
  auto* quiet_flag = app.add_flag("-q,--quiet", quiet, "errors, warnings and results only (no status lines, no progress)");
  app.add_flag("-v,--verbose", verbose, "also the resolved session options and per-rank load times")->excludes(quiet_flag);
  app.require_subcommand(1);

  add_generate_command(app, g);
  add_logits_command(app, g);
  add_tokenize_commands(app, g);
  add_eval_command(app, g);
  add_serve_command(app, g);
#if TPSHARD_HAVE_CUDA
  add_bench_load_command(app, g);
#else
  add_bench_load_unavailable(app, g);
#endif

  // Runs after all options are parsed and before the subcommand's callback.
  app.parse_complete_callback([&] {
    // -q / -v, else TPSHARD_LOG_LEVEL, else info; every later status line goes through common/log.h.
    tpshard::set_log_level(quiet     ? tpshard::LogLevel::Quiet
                           : verbose ? tpshard::LogLevel::Verbose
                                     : tpshard::tuning().log_level.value_or(tpshard::LogLevel::Info));
    if (!tpshard::log_enabled(tpshard::LogLevel::Info)) g.session.quiet = true;
    g.session.device = parse_device(device);
    g.session.verify_hashes = !no_verify;
    const tpshard::WorkerEnv env = tpshard::read_worker_env();
    // workers are stopped by their launcher; one tprun per node under srun / mpirun is a launcher itself
    const bool worker = env.found && !tpshard::is_node_launcher(env, g.session);
    g.primary_process = !worker || (env.source != "tprun" && env.rank == 0);
    g.checked_by_launcher = worker && env.source == "tprun";
    if (app.get_option("--tp")->count() == 0)
      g.session.tp_size = default_tp_size(g.session.model_dir, g.session.pp_size, !worker);
    // Missing inputs, unwritable outputs, bad option combinations: fail in seconds, not after loading.
    for (const auto& check : g.preflight) check();
    if (g.session.dp_size > 1 && !g.resumable_job)
      throw UsageError("--dp " + std::to_string(g.session.dp_size) +
                           ": replicas split the items of a batch job (eval, generate --input); this command runs one",
                       "drop --dp, or run the prompts as a batch job: generate --input FILE --output FILE");
    if (!worker) {
      tpshard::SessionOptions launch = g.session;
      launch.device = tpshard::resolve_device(g.session.device);  // CUDA with no usable GPU: the error is here
      tpshard::check_layout_runs(launch, launch.device);  // a layout that cannot run: before any process starts
      const int rc = tpshard::launch_workers_if_needed(argc, argv, launch);
      if (rc >= 0) throw ExitNow{rc};
    }
    if (!worker) {
      void (*on_interrupt)(int) = g.resumable_job ? on_interrupt_resumable : on_interrupt_streamed;
      std::signal(SIGINT, on_interrupt);
      std::signal(SIGTERM, on_interrupt);
    }
  });

  // `tprun SUBCOMMAND [SUBCOMMAND...] --help` (no model directory yet): the help of the deepest subcommand
  // named (`eval triviaqa --help`: triviaqa's), not the top-level one (CLI11 would take the subcommand's
  // name as MODEL_DIR).
  if (argc >= 3) {
    CLI::App* level = &app;
    std::string path = "tprun MODEL_DIR";
    for (int i = 1; i < argc; ++i) {
      const std::string word = argv[i];
      if (word == "--help" || word == "-h") {
        if (level == &app) break;
        std::printf("%s", level->help(path.substr(0, path.rfind(' '))).c_str());
        return 0;
      }
      CLI::App* sub = nullptr;
      for (CLI::App* s : level->get_subcommands([](CLI::App*) { return true; }))
        if (s->get_name() == word) sub = s;
      if (sub != nullptr) {
        level = sub;
        path += " " + word;
      } else if (level == &app) {
        break;  // the first word is not a subcommand: MODEL_DIR, parsed below
      }
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::optional<tpshard::Error> why = tpshard::cli::explain_subcommand_error(app, e, "tprun MODEL_DIR");
    if (!why) why = tpshard::cli::explain_unexpected_option(app, e, "tprun", "tprun MODEL_DIR",
                                                           std::vector<std::string>(argv + 1, argv + argc));
    if (!why) why = tpshard::cli::explain_parse_error(app, e, "tprun", "tprun MODEL_DIR");  // CLI11's message
    std::fprintf(stderr, "error: %s\nhint: %s\n", why->what(), why->hint().c_str());
    return 2;
  } catch (const ExitNow& e) {
    return e.code;
  } catch (const JobAlreadyDone&) {
    return 0;
  } catch (const tpshard::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    if (!e.hint().empty()) std::fprintf(stderr, "hint: %s\n", e.hint().c_str());
    return dynamic_cast<const UsageError*>(&e) ? 2 : 1;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "error: out of host memory (std::bad_alloc)\n"
                         "hint: lower --max-batch / --max-seq-len (the CPU backend reserves its kv_cache up front; the f32 "
                         "weights were checked against the available memory before loading), or use fewer --threads\n");
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return tpshard::cli::stdout_status("tprun");
}
