// memory_plan.h: per-GPU memory estimate for running a converted model at one tp_size
// (`tpshard plan`; reusable by the runtime to size kv_cache and refuse plans that cannot fit).
// Formula (all per rank; documented in docs/CONVERT.md, "Memory plan"):
//   weights    = max over ranks of manifest weight_bytes (the arena)
//   kv_cache   = 2 * num_hidden_layers * batch * max_seq * num_kv_heads_per_rank * head_dim * kv_dtype_bytes
//   activations (prefill of all batch*max_seq tokens at once, the worst case; T = batch*max_seq):
//              = T * (2*hidden*4 + hidden*e + qkv_rows_per_rank*e + heads_per_rank*head_dim*e
//                     + (ffn_rows_per_rank + intermediate_size_per_rank)*e)
//              + heads_per_rank * max_seq * max_seq * 4        (one sequence's f32 attention scores)
//              + batch * (vocab_size_per_rank + vocab_size_padded) * 4   (local and all-gathered f32 logits)
//     with e = bytes of the weight dtype, qkv_rows_per_rank = (heads_per_rank + 2*kv_heads_per_rank)*head_dim,
//     ffn_rows_per_rank = intermediate_size_per_rank (x2 for gated MLPs). The 2*hidden*4 term is the
//     f32 residual stream and the all_reduce buffer.
//   workspace  = 256 MiB (cuBLASLt workspace, NCCL buffers, allocator slack; CUDA context not included)
#pragma once
#include <cstdint>

#include "format/manifest.h"

namespace tpshard {

struct MemoryPlan {
  int tp_size = 1;
  int64_t batch = 1, max_seq = 1;
  uint64_t weight_bytes = 0;
  uint64_t kv_cache_bytes = 0;
  uint64_t activation_bytes = 0;
  uint64_t workspace_bytes = 0;
  uint64_t total_bytes() const { return weight_bytes + kv_cache_bytes + activation_bytes + workspace_bytes; }
};

constexpr uint64_t kWorkspaceBytes = 256ull << 20;

/// Compute the plan. kv_dtype_bytes 0 means "the weight dtype's size". Throws Error when the manifest
/// has no shards for tp_size (shards_for) or batch/max_seq are not positive.
MemoryPlan plan_memory(const Manifest& m, int tp_size, int64_t batch, int64_t max_seq, const std::string& model_dir,
                       size_t kv_dtype_bytes = 0);

}  // namespace tpshard
