// memory_plan.h: per-GPU memory estimate for running a converted model at one tp_size
// (`tpshard plan`; reusable by the runtime to size kv_cache and refuse plans that cannot fit).
// Formula (all per rank; documented in docs/CONVERT.md, "Memory plan"):
//   weights    = max over ranks of manifest weight_bytes (the arena)
//   kv_cache   = 2 * num_hidden_layers * (batch + 1) * max_seq * num_kv_heads_per_rank * head_dim * kv_dtype_bytes
//                (one slot per sequence plus the scratch slot that padded decode rows write)
//   activations: what the CUDA runner allocates (runtime/cuda/layers/transformer.cu, cuda_runner.cpp) for
//     T = max(R, min(kMaxStepTokens, batch*max_seq)) tokens per step and R = decode_bucket(batch) rows:
//              = T * (hidden*4 + 3*hidden*e + qkv_rows_per_rank*e + heads_per_rank*head_dim*e
//                     + (ffn_rows_per_rank + intermediate_size_per_rank)*e + 16)
//              + R * (hidden*e + (1 + tp_size) * vocab_size_per_rank * 4 + 8 * (1 + tp_size)
//                     + heads_per_rank * 16 * (head_dim + 2) * 4)
//     with e = bytes of the weight dtype, qkv_rows_per_rank = (heads_per_rank + 2*kv_heads_per_rank)*head_dim,
//     ffn_rows_per_rank = intermediate_size_per_rank (x2 for gated MLPs): the f32 residual stream, the two
//     normalized inputs and the all_reduce buffer, the QKV, attention, MLP and activation outputs, the
//     step metadata; per row the last hidden state, local and all-gathered f32 logits, argmax pairs and
//     the split-K attention partials (at most 16 splits).
//   workspace  = 256 MiB (cuBLASLt workspace 32 MiB, custom all_reduce staging <= 4 MiB, NCCL buffers,
//                allocator slack; CUDA context not included)
#pragma once
#include <cstdint>

#include "model/manifest.h"

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

/// Tokens per prefill step of the CUDA runner: large enough for compute-bound GEMMs, small enough that
/// the activation workspace stays well under the 1 GiB overhead budget (GPT-NeoX-20B at tp 2: about
/// 130 KiB per token).
constexpr int kMaxStepTokens = 1024;

/// Rows of the decode step that serves `batch` sequences: CUDA graphs are captured per bucket
/// 1, 2, 4, 8, then multiples of 8.
inline int decode_bucket(int batch) {
  if (batch <= 1) return 1;
  if (batch <= 2) return 2;
  if (batch <= 4) return 4;
  return (batch + 7) / 8 * 8;
}

/// Compute the plan. kv_dtype_bytes 0 means "the weight dtype's size". Throws Error when the manifest
/// has no shards for tp_size (shards_for) or batch/max_seq are not positive.
MemoryPlan plan_memory(const Manifest& m, int tp_size, int64_t batch, int64_t max_seq, const std::string& model_dir,
                       size_t kv_dtype_bytes = 0);

}  // namespace tpshard
