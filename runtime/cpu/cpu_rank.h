// cpu_rank.h: what one rank of the CPU backend loads, whether it is a thread of the job's one process
// (cpu_session.h) or a process of its own (cpu_worker.h): its shard's weights, widened to f32, in a CPU
// runner over the communicator and stage link it is given.
#pragma once
#include <memory>
#include <string>

#include "model/manifest.h"
#include "model/parallel_layout.h"
#include "runtime/comm.h"
#include "runtime/model_runner.h"
#include "runtime/session_types.h"
#include "runtime/stage_link.h"

namespace tpshard {
class ThreadPool;
}

namespace tpshard::cpu {

/// "tp_rank 1 of pp_stage 0 of dp_rank 2" (the parts with size > 1 only beyond tp_rank): for messages.
std::string rank_name(const RankGrid& grid, int world_rank);

/// Open world_rank's (pp_stage, tp_rank) shard of layout, load its weights (XXH3 checked when
/// opts.verify_hashes; a progress bar on stderr when show_progress) and build its runner over comm, pool
/// and link (nullptr when pp_size is 1). Throws Error naming the shard file on a bad or missing shard.
std::unique_ptr<ModelRunner> load_cpu_rank(const SessionOptions& opts, const Manifest& manifest,
                                           const ParallelLayout& layout, int world_rank, Communicator& comm,
                                           ThreadPool& pool, StageLink* link, int max_batch, int max_seq_len,
                                           bool show_progress);

}  // namespace tpshard::cpu
