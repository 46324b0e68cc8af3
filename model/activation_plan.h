// activation_plan.h: the device buffers one rank's CUDA runner allocates besides weights and kv_cache,
// as one formula. runtime/cuda/layers/transformer.cu and cuda_runner.cpp allocate exactly these sizes;
// `tpshard plan` (model/memory_plan.h) adds them up. CUDA-free, so the planner runs anywhere.
#pragma once
#include <cstdint>

#include "model/model_config.h"
#include "model/parallel_layout.h"

namespace tpshard {

/// Tokens per prefill step of the CUDA runner: large enough for compute-bound GEMMs, small enough that
/// the activation workspace stays well under the 1 GiB overhead budget (GPT-NeoX-20B at tp 2: about
/// 130 KiB per token).
constexpr int kMaxStepTokens = 1024;
/// Split-K blocks per head of the decode attention (its partials buffer is sized for this many).
constexpr int kAttentionMaxSplits = 16;
/// Key-range pieces of a shared prefix in cascade decode attention (kernels/attention_cascade.cuh); its
/// partials buffer is sized for this many per (row, head).
constexpr int kCascadeMaxSplits = 16;
/// Blocks per row of the split argmax over the vocabulary (kernels/logits.cuh).
constexpr int kArgmaxMaxSplits = 64;

/// Rows of the decode step that serves `batch` sequences: CUDA graphs are captured per bucket
/// 1, 2, 4, 8, then multiples of 8.
inline int decode_bucket(int batch) {
  if (batch <= 1) return 1;
  if (batch <= 2) return 2;
  if (batch <= 4) return 4;
  return (batch + 7) / 8 * 8;
}

/// Tokens per step T = max(rows, min(step_tokens, batch * max_seq)) for rows = decode_bucket(batch).
int64_t step_tokens(int64_t batch, int64_t max_seq, int64_t rows, int64_t step_tokens = kMaxStepTokens);

/// int32 arrays of max_tokens each in a step's metadata: tokens | slots | positions | last_rows |
/// prefix_slots | prefix_lens | q_tiles (runtime/cuda/layers/transformer.h StepMeta).
constexpr uint64_t kStepMetaArrays = 7;

/// Bytes of each buffer (T = tokens per step, R = logits rows per step, e = bytes of the weight dtype,
/// ranges of this tp_rank). Per token: step metadata kStepMetaArrays x int32, the f32 residual stream, the two
/// normalized inputs and the row-parallel output (e each), QKV, attention output, MLP up (x2 gated) and
/// activation. Per row: last hidden state, local f32 logits, argmax pair and its split partials and
/// counters, split-K attention partials (kAttentionMaxSplits x (head_dim + 2) f32 per head) and counters,
/// the cascade attention's prefix partials (kCascadeMaxSplits x (head_dim + 2) f32 per head), and the
/// tp_size-wide gathered logits and argmax pairs. Mixture of experts (num_local_experts E > 0,
/// top k; kernels/moe_block.cuh MoeWorkspace): MLP up and activation hold one expert's rows (at most T),
/// and moe the router logits (T E f32), the routing (T k expert ids, weights and slots, 4 bytes each), the
/// per-expert offsets and counts (2 E + 1 int32), the gathered input and expert output rows
/// (moe_permuted_rows(T k, E) rows of H, e each) and the f32 sums of the masked decode path (T H f32).
struct ActivationPlan {
  uint64_t meta = 0, residual = 0, h1 = 0, h2 = 0, qkv = 0, attn = 0, ffn = 0, act = 0, out = 0;
  uint64_t last = 0, logits = 0, argmax = 0, argmax_partial = 0, argmax_counters = 0;
  uint64_t attention_partial = 0, attention_counters = 0, cascade_partial = 0;
  uint64_t gathered_logits = 0, gathered_argmax = 0;
  uint64_t moe = 0;
  uint64_t qk_sums = 0;  ///< qk_norm_across_heads: per token the sums of squares of the whole Q and K (2 f32)
  uint64_t total() const;
};

/// The plan for one rank: ranges = its TpRankRanges (the planner passes the largest rank's counts,
/// ParallelLayout::max_counts; gathered buffers use the largest vocab_rows too).
ActivationPlan plan_activations(const ModelConfig& c, const TpRankRanges& ranges, int tp_size, uint64_t dtype_bytes,
                                int64_t tokens, int64_t rows);

}  // namespace tpshard
