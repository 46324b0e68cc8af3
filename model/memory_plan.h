// memory_plan.h: per-GPU memory estimate for running a converted model at one tp_size
// (`tpshard plan`; reusable by the runtime to size kv_cache and refuse plans that cannot fit).
// Formula (all per rank; documented in docs/CONVERT.md, "Memory plan"):
// Each rank is planned with its own ranges (model/parallel_layout.h); the fields of MemoryPlan are the
// largest over the ranks:
//   weights    = manifest weight_bytes of the rank (the arena)
//   kv_cache   = 2 * (batch + 1) * sum over the stage's layers of positions(layer) * num_kv_heads_per_rank *
//                head_dim * kv_dtype_bytes (one slot per sequence plus the scratch slot that padded decode
//                rows write; positions = max_seq, or a local layer's ring, model/kv_ring.h)
//   activations: exactly what the CUDA runner allocates (model/activation_plan.h, the formula the runner
//     allocates from) for T = step_tokens(batch, max_seq, R) tokens per step and R = decode_bucket(batch)
//     rows, with the rank's head, KV-head, MLP and vocabulary counts.
//   workspace  = 256 MiB (cuBLASLt workspace 32 MiB, custom all_reduce staging <= 4 MiB, NCCL buffers,
//                allocator slack; CUDA context not included)
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "model/activation_plan.h"
#include "model/manifest.h"

namespace tpshard {

/// One tp_rank's share of the plan (its own ranges: ranks of an uneven split differ).
struct RankMemory {
  int tp_rank = 0;
  int pp_stage = 0;
  uint64_t weight_bytes = 0;      ///< its manifest weight_bytes (the arena)
  uint64_t kv_cache_bytes = 0;    ///< with its own KV-head count
  uint64_t activation_bytes = 0;  ///< with its own head, KV-head, MLP and vocabulary counts
  uint64_t total_bytes = 0;       ///< + the workspace
};

struct MemoryPlan {
  int tp_size = 1;
  int pp_size = 1;
  int64_t batch = 1, max_seq = 1;
  uint64_t weight_bytes = 0;
  uint64_t kv_cache_bytes = 0;
  uint64_t activation_bytes = 0;
  uint64_t workspace_bytes = 0;
  std::vector<RankMemory> ranks;  ///< [pp_size * tp_size], by pp_stage then tp_rank
  int heaviest_rank = 0;          ///< index in ranks of the most weight bytes (the slowest decode step), lowest on ties
  /// Largest per-field values over the ranks (each rank's buffers fit in them).
  uint64_t total_bytes() const { return weight_bytes + kv_cache_bytes + activation_bytes + workspace_bytes; }
};

constexpr uint64_t kWorkspaceBytes = 256ull << 20;

/// Compute the plan of the (pp_size, tp_size) layout; each stage's kv_cache counts its own layers.
/// kv_dtype_bytes 0 means "the weight dtype's size". Throws Error when the manifest has no shards for
/// the layout (shards_for) or batch/max_seq are not positive.
MemoryPlan plan_memory(const Manifest& m, int tp_size, int64_t batch, int64_t max_seq, const std::string& model_dir,
                       size_t kv_dtype_bytes = 0, int pp_size = 1);

/// Device bytes of (pp_stage, tp_rank)'s weight arena for c stored in dtype, from the tensor plan (each
/// tensor 4096-aligned, as tpshard convert lays it out): what its shard's weight_bytes will be.
uint64_t planned_weight_bytes(const ModelConfig& c, const ParallelLayout& layout, int pp_stage, int tp_rank, DType dtype);

/// The plan of an unconverted model (a config.json) at any tp x pp layout: weights from
/// planned_weight_bytes, the rest as plan_memory. Throws Error for a layout the model cannot take.
MemoryPlan plan_memory_for_config(const ModelConfig& c, DType dtype, int tp_size, int pp_size, int64_t batch,
                                  int64_t max_seq, size_t kv_dtype_bytes = 0);

/// The largest batch (up to 2^20) whose plan(batch).total_bytes() fits in capacity_bytes; 0 when batch 1
/// does not. plan must grow with the batch.
int64_t largest_batch_that_fits(const std::function<MemoryPlan(int64_t batch)>& plan, uint64_t capacity_bytes);

/// The largest max_seq in 1..limit whose plan(max_seq).total_bytes() fits in capacity_bytes; 0 when
/// max_seq 1 does not. plan must grow with max_seq.
int64_t largest_max_seq_that_fits(const std::function<MemoryPlan(int64_t max_seq)>& plan, uint64_t capacity_bytes,
                                  int64_t limit);

}  // namespace tpshard
