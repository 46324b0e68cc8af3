// cpu_rank.cpp: see cpu_rank.h.
#include "runtime/cpu/cpu_rank.h"

#include <chrono>

#include "common/log.h"
#include "common/progress.h"
#include "format/shard_file.h"
#include "model/rank_shard.h"
#include "runtime/cpu/cpu_runner.h"
#include "runtime/cpu/cpu_weights.h"
#include "runtime/cpu/thread_pool.h"
#include "runtime/process_memory.h"

namespace tpshard::cpu {

std::string rank_name(const RankGrid& grid, int world_rank) {
  const RankCoord c = grid.coord(world_rank);
  std::string who = "tp_rank " + std::to_string(c.tp_rank);
  if (grid.pp_size > 1) who += " of pp_stage " + std::to_string(c.pp_stage);
  if (grid.dp_size > 1) who += " of dp_rank " + std::to_string(c.dp_rank);
  return who;
}

std::unique_ptr<ModelRunner> load_cpu_rank(const SessionOptions& opts, const Manifest& manifest,
                                           const ParallelLayout& layout, int world_rank, Communicator& comm,
                                           ThreadPool& pool, StageLink* link, int max_batch, int max_seq_len,
                                           bool show_progress) {
  const RankCoord c = layout.coord(world_rank);
  const std::string who = rank_name(layout, world_rank);
  const std::unique_ptr<ShardReader> reader =
      open_rank_shard(manifest, opts.model_dir, layout.tp_size, c.tp_rank, layout.pp_size, c.pp_stage);
  const auto load_start = std::chrono::steady_clock::now();
  uint64_t stage_bytes = 0;  // what this rank reads: the progress total (world rank 0 speaks for all)
  for (const TensorRecord& t : reader->tensors()) stage_bytes += t.raw_bytes;
  Progress progress("loading " + who, stage_bytes, ProgressUnit::Bytes, show_progress, 10.0, nullptr, 0,
                    /*min_seconds=*/2.0);
  ModelWeights weights = load_weights(*reader, manifest.model, opts.verify_hashes, layout, c.pp_stage, &progress);
  progress.finish();
  if (!opts.quiet)
    log_line(LogLevel::Verbose, "tprun: %s loaded %s in %.3f s (hashes %s)\n", who.c_str(),
             human_bytes(reader->file_bytes()).c_str(),
             std::chrono::duration<double>(std::chrono::steady_clock::now() - load_start).count(),
             opts.verify_hashes ? "verified" : "not verified, --no-verify");
  CpuRunnerOptions ro;
  ro.max_batch = max_batch;
  ro.max_seq_len = max_seq_len;
  ro.link = layout.pp_size > 1 ? link : nullptr;
  ro.micro_batches = opts.micro_batches;
  return make_cpu_runner(manifest.model, std::move(weights), comm, pool, ro);
}

}  // namespace tpshard::cpu
