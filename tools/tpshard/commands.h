// commands.h: the subcommands of the `tpshard` CLI. Each run_* returns the process exit code and
// throws tpshard::Error for user-facing failures (main prints them and exits 1).
#pragma once
#include <string>
#include <vector>

#include "convert/convert.h"

namespace tpshard::cli {

int run_convert(const ConvertOptions& opt);
/// tp_size 0: all tp sizes. list_tensors: print the tensor table of rank `rank` of each listed tp size.
int run_inspect(const std::string& model_dir, int tp_size, bool list_tensors, int rank);
/// Recompute every tensor hash and file hash; Error naming the first bad tensor/file.
int run_verify(const std::string& model_dir, int tp_size);
/// The per-GPU memory plan of the tp x pp (x dp replicas) layout. batch / max_seq 0: not given; with
/// gpu_gib > 0 the largest batch at max_seq (or, batch given, the largest max_seq) that fits is planned.
/// shared_prefix: tokens every sequence of the batch shares (0: none); planned as the runtime runs it
/// (one more fixed-size kv_cache slot for the prefix). Error when the plan does not fit in gpu_gib (> 0),
/// or shared_prefix is not below max_seq.
int run_plan(const std::string& model_dir, int tp_size, int pp_size, int dp_size, int64_t batch, int64_t max_seq,
             int64_t shared_prefix,
             double gpu_gib, const std::string& dtype);

/// "none" | "zstd[:level]" | "zstd-planes[:level]" -> codec and level. Error on anything else.
void parse_compress(const std::string& s, Codec* codec, int* level);

}  // namespace tpshard::cli
