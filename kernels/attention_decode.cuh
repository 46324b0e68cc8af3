// attention_decode.cuh: the decode attention kernel, for steps with one query token per sequence
// (AttentionParams::decode or rotary_append). Same contract and results (within fp32 rounding) as the
// tiled kernel of attention.cu, but no block-wide reduction per key tile: each warp owns a contiguous
// key range with its own running max / sum / output in registers (several keys' loads in flight), the
// warps are merged once through shared memory, then the splits as in flash-decoding
// (https://crfm.stanford.edu/2023/10/12/flashdecoding.html). attention() picks it for decode steps
// it supports; tests and benchmarks may call it directly.
#pragma once
#include "kernels/attention.cuh"

namespace tpshard::cuda {

/// Fewest keys per split the decode kernel accepts before it uses fewer splits than asked.
constexpr int kDecodeMinSplitKeys = 32;

/// Splits the decode kernel really uses for a sequence of len keys (len >= 1) when launched with
/// num_splits: min(num_splits, ceil(len / kDecodeMinSplitKeys)), at least 1. The host picks num_splits
/// from the longest possible context; the kernel knows the real one and drops the splits it does not
/// need (those blocks exit at once, and the split merge counts only the splits used). Split s covers
/// keys [s * len / splits, (s + 1) * len / splits), never empty. With a local window, len is the
/// number of keys in the window and the ranges start at attention_first_key().
__host__ __device__ inline int attention_decode_splits(int len, int num_splits) {
  const int by_keys = (len + kDecodeMinSplitKeys - 1) / kDecodeMinSplitKeys;
  const int s = num_splits < by_keys ? num_splits : by_keys;
  return s > 1 ? s : 1;
}

/// First key of piece s of `pieces` over len keys (balanced: no piece is empty when pieces <= len).
/// 32-bit: attention_decode() checks max_seq_len * max(num_splits, 8) < 2^32.
__host__ __device__ inline int attention_split_begin(int len, int pieces, int s) {
  return static_cast<int>(static_cast<unsigned>(len) * static_cast<unsigned>(s) / static_cast<unsigned>(pieces));
}

/// True when the decode kernel handles p: head_dim a multiple of 4 (4-element vector loads) and
/// <= 256, k_cache and v_cache aligned to 4 elements. attention() falls back to the tiled kernel if not.
bool attention_decode_supported(const AttentionParams& p);

/// The decode kernel on p (every token the only query of its sequence in this call; with rotary_append
/// the usual no-shared-slot rule of AttentionParams). Throws Error when !attention_decode_supported(p)
/// or p breaks the AttentionParams contract. Launched with programmatic dependent launch. With
/// p.cascade_partial and attention_cascade_supported(p) (attention_cascade.cuh), the prefix pass runs
/// first and the kernel attends keys prefix_lens[t]..positions[t] of each row with a prefix, merging the
/// prefix partials into its result; otherwise cascade_partial is ignored.
void attention_decode(const AttentionParams& p, cudaStream_t stream);

}  // namespace tpshard::cuda
