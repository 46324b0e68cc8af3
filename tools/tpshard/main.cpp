// main.cpp: `tpshard` CLI entry: parse arguments (CLI11), dispatch to one subcommand, and turn
// tpshard::Error into "error: ...\nhint: ..." with exit code 1. Usage errors (unknown, missing or bad
// option or argument; an unknown or missing subcommand, printed as error/hint naming it and the choices)
// exit 2, as in tprun; --help / --version exit 0; a convert stopped by SIGINT/SIGTERM exits 128 + signal.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>

#include "common/log.h"
#include "runtime/tuning.h"
#include "tools/cli_subcommands.h"
#include "tools/cli_validators.h"
#include "tools/stdout_status.h"
#include "tools/version_text.h"
#include "convert/fs_util.h"
#include "format/error.h"
#include "model/parallel_layout.h"
#include "tools/tpshard/commands.h"

int main(int argc, char** argv) {
  // line by line: verify's "ok" lines (stdout) and "BAD" lines and errors (stderr) keep their order in one file
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  using namespace tpshard;
  CLI::App app{"tpshard: convert Hugging Face checkpoints into per-rank tensor-parallel shards"};
  app.set_version_flag("--version", version_text());
  app.require_subcommand(1);

  ConvertOptions copt;
  std::string compress = "none";
  auto* convert = app.add_subcommand("convert", "HF checkpoint -> OUT/{manifest.json, tpN/rankR.tps}");
  convert->add_option("hf_dir", copt.hf_dir,
                      "Hugging Face model directory (config.json + *.safetensors), or a repo id ORG/NAME[@REVISION] "
                      "of the local hub cache")->required();  // checked by run_convert: a missing directory is an error (exit 1), as in inspect / verify / tprun
  convert->add_option("-o,--out", copt.out_dir, "output directory (must not exist unless --force)")->required();
  std::vector<std::string> tp_lists;  // "1,2" items; split after parsing (CLI11's delimiter drops "2,,4"'s empty item)
  auto* tp_opt = convert->add_option("--tp", tp_lists, "tp sizes to produce, comma separated")->default_str("1")
      ->check(tpshard::cli::positive_int_list(tpshard::kMaxTpSize, "the largest tp_size"));
  std::vector<std::string> add_tp_lists;
  auto* add_tp = convert->add_option("--add-tp", add_tp_lists,
                      "tp sizes to add to the existing conversion in OUT (same checkpoint and dtype; layouts it has are "
                      "skipped; its identity, and so resumable jobs, stay)")
      ->check(tpshard::cli::positive_int_list(tpshard::kMaxTpSize, "the largest tp_size"))
      ->excludes(tp_opt);
  std::vector<std::string> pp_lists;
  convert->add_option("--pp", pp_lists, "pipeline stage counts to produce, comma separated (each with every --tp)")
      ->default_str("1")
      ->check(tpshard::cli::positive_int_list(4096, "the largest pp_size"));
  convert->add_option("--dtype", copt.dtype, "keep|fp16|bf16|fp32")->check(CLI::IsMember({"keep", "fp16", "f16", "float16", "bf16", "bfloat16", "fp32", "f32", "float32"}))->default_str("keep");
  convert->add_option("--compress", compress, "none|zstd[:level]|zstd-planes[:level] (per-tensor zstd, 2-D tensors)")->default_str("none");
  convert->add_option("--threads", copt.threads, "worker threads (default: min(cores, 8))")
      ->check(tpshard::cli::integer_in_range(0, 256, "0 = min(cores, 8)"));
  convert->add_flag("--force", copt.force, "replace an existing output directory written by tpshard")->excludes(add_tp);
  convert->add_flag("--allow-unused", copt.allow_unused, "skip (and list) source tensors the model does not use");
  convert->add_flag("--allow-nonfinite", copt.allow_nonfinite, "convert tensors holding NaN/inf (refused by default: a corrupt checkpoint)");
  bool no_source_hash = false, quiet = false;
  convert->add_flag("--no-source-hash", no_source_hash, "do not fingerprint the source files (manifest gets 0)");
  convert->add_flag("-q,--quiet", quiet, "no progress line and no summary table (also TPSHARD_LOG_LEVEL=quiet)");

  std::string model_dir;
  int tp = 0, rank = 0;
  bool tensors = false;
  auto* inspect = app.add_subcommand("inspect", "print the manifest and (with --tensors) the tensor table");
  inspect->add_option("MODEL_DIR", model_dir, "directory written by tpshard convert")->required();
  inspect->add_option("--tp", tp, "only this tp size")->check(tpshard::cli::positive_for(tp));
  auto* tensors_flag = inspect->add_flag("--tensors", tensors, "list every tensor");
  inspect->add_option("--rank", rank, "tp_rank whose tensor table --tensors prints (default 0)")
      ->needs(tensors_flag)
      ->check(tpshard::cli::non_negative_for(rank));

  auto* verify = app.add_subcommand("verify", "recompute every tensor and file hash");
  verify->add_option("MODEL_DIR", model_dir, "directory written by tpshard convert")->required();
  verify->add_option("--tp", tp, "only this tp size (default: all)")->check(tpshard::cli::positive_for(tp));

  int64_t batch = 0, max_seq = 0, shared_prefix = 0;  // batch / max_seq 0: not given (plan answers the largest that fits in --gpu-mem)
  double gpu_gib = 0;
  int pp = 1, dp = 1;
  std::string plan_dtype;
  auto* plan = app.add_subcommand("plan", "per-GPU memory plan: weights, kv_cache, activations, workspace; the largest "
                                          "batch or max_seq that fits in --gpu-mem");
  plan->add_option("MODEL_DIR", model_dir,
                   "directory written by tpshard convert, or (before converting) a Hugging Face directory, its repo id "
                   "ORG/NAME[@REVISION] in the local hub cache, or a config.json")
      ->required();
  plan->add_option("--tp", tp, "tp size")->required()->check(tpshard::cli::positive_for(tp));
  plan->add_option("--pp", pp, "pipeline stages (a converted directory: a layout it holds)")
      ->check(tpshard::cli::positive_for(pp));
  plan->add_option("--dp", dp, "data-parallel replicas (the per-GPU plan is the same; the GPU count is tp x pp x dp)")
      ->check(tpshard::cli::positive_for(dp));
  plan->add_option("--dtype", plan_dtype, "stored dtype to plan for (Hugging Face directory or config.json; default its torch_dtype)")
      ->check(CLI::IsMember({"keep", "fp16", "f16", "float16", "bf16", "bfloat16", "fp32", "f32", "float32"}));
  plan->add_option("--batch", batch,
                   "sequences per batch (required without --gpu-mem; with it, default: the largest that fits at --max-seq)")
      ->check(tpshard::cli::positive_for(batch));
  plan->add_option("--max-seq", max_seq,
                   "max tokens per sequence, prompt + generated (default: tprun's, min(max_position_embeddings, 2048); "
                   "with --batch and --gpu-mem: the largest that fits)")
      ->check(tpshard::cli::positive_for(max_seq));
  plan->add_option("--shared-prefix", shared_prefix,
                   "tokens every sequence of the batch shares (few-shot examples, a system prompt): prefilled once, "
                   "held in one more kv_cache slot")
      ->check(CLI::NonNegativeNumber);
  plan->add_option("--gpu-mem", gpu_gib, "GPU memory in GiB to check the plan against (H100: 80, H200: 139)")
      ->check(tpshard::cli::positive_for(gpu_gib));

  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {  // --help, --version
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::optional<tpshard::Error> why = cli::explain_subcommand_error(app, e, "tpshard");
    if (!why) why = cli::explain_unexpected_option(app, e, "tpshard", "tpshard",
                                                           std::vector<std::string>(argv + 1, argv + argc));
    // CLI11's own message, with our hint; its exit code (100 and up, by error class) is dropped
    if (!why) why = cli::explain_parse_error(app, e, "tpshard", "tpshard");
    std::fprintf(stderr, "error: %s\nhint: %s\n", why->what(), why->hint().c_str());
    return 2;
  }
  auto report = [](const Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    if (!e.hint().empty()) std::fprintf(stderr, "hint: %s\n", e.hint().c_str());
  };
  if (*convert) {
    try {  // a bad --compress value is a usage error like a bad --dtype, with its own error/hint text
      cli::parse_compress(compress, &copt.codec, &copt.zstd_level);
    } catch (const Error& e) {
      report(e);
      return 2;
    }
  }
  int rc = 0;
  try {
    // -q, else TPSHARD_LOG_LEVEL as in tprun (docs/TUNING.md): quiet drops convert's progress and table.
    // Parsed by runtime/tuning.cpp, the one reader of the variables; tpshard uses only this one.
    if (!quiet) quiet = log_level_from_environment() == LogLevel::Quiet;
    if (*convert) {
      if (!tp_lists.empty()) copt.tp_sizes = cli::int_list_values(tp_lists);
      if (!add_tp_lists.empty()) {
        copt.tp_sizes = cli::int_list_values(add_tp_lists);
        copt.add_layouts = true;
      }
      if (!pp_lists.empty()) copt.pp_sizes = cli::int_list_values(pp_lists);
      copt.hash_source = !no_source_hash;
      copt.progress = !quiet;
      rc = cli::run_convert(copt);
    } else if (*inspect) {
      rc = cli::run_inspect(model_dir, tp, tensors, rank);
    } else if (*verify) {
      rc = cli::run_verify(model_dir, tp);
    } else if (*plan) {
      rc = cli::run_plan(model_dir, tp, pp, dp, batch, max_seq, shared_prefix, gpu_gib, plan_dtype);
    }
  } catch (const Error& e) {
    report(e);
    // Ctrl-C / SIGTERM stopped a convert (its temporary output is removed by then): exit as tprun does.
    if (interrupt_signal() != 0) return 128 + interrupt_signal();
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return rc != 0 ? rc : cli::stdout_status("tpshard");
}
