// attention_cascade.cuh: cascade decode attention over a shared prompt prefix. In a decode step where
// several sequences name the same prefix slot (AttentionParams::prefix_slots / prefix_lens), the keys
// [0, prefix_len) are the same for all of them. attention_cascade_prefix() reads them ONCE per block of
// up to attention_cascade_seqs_per_block() such sequences: one block per (block of step rows, KV head,
// prefix split) loads a tile of the prefix's K/V into shared memory and computes the partial softmax
// state (running max m, sum l, unnormalized output acc) of every query of those rows that reads that KV
// head (all their GQA query heads). The decode kernel (attention_decode.cu) then attends each sequence's
// own keys [prefix_len, position] and merges its state with the prefix partials (the same (m, l, acc)
// merge as its split-K). This is the "cascade" / shared-prefix decomposition of FlashInfer
// (https://flashinfer.ai/2024/02/02/cascade-inference.html) and Hydragen (arXiv:2402.05099).
// Results equal the one-pass kernel within fp32 rounding (another summation order).
#pragma once
#include "kernels/attention.cuh"

namespace tpshard::cuda {

/// Fewest prefix keys per split (one shared-memory tile).
constexpr int kCascadeMinSplitKeys = 32;

/// Splits of a prefix of prefix_len >= 1 keys: min(max_splits, ceil(prefix_len / kCascadeMinSplitKeys)),
/// at least 1. Split s covers keys [s * prefix_len / splits, (s + 1) * prefix_len / splits), never empty.
/// The prefix kernel and the decode kernel's merge both use this.
__host__ __device__ inline int attention_cascade_splits(int prefix_len, int max_splits) {
  const int by_keys = (prefix_len + kCascadeMinSplitKeys - 1) / kCascadeMinSplitKeys;
  const int s = max_splits < by_keys ? max_splits : by_keys;
  return s > 1 ? s : 1;
}

/// Step rows (sequences) one block of the prefix kernel serves: at most 64, and their queries (rows x
/// query heads per KV head) at most 256 and at most 8192 / head_dim (the per-thread accumulators and
/// the shared-memory query tile). 0 when not even one row fits (e.g. MQA with 71 query heads per KV head).
int attention_cascade_seqs_per_block(const AttentionParams& p);

/// True when attention_decode() runs p as a cascade: cascade_partial, prefix_slots and prefix_lens
/// set, cascade_max_splits >= 1, no local window (window 0), the decode kernel supports p, and
/// attention_cascade_seqs_per_block(p) >= 1. Otherwise the decode kernel reads the prefix itself.
bool attention_cascade_supported(const AttentionParams& p);

/// The prefix pass (p a decode step, attention_cascade_supported(p)): for every token t with
/// prefix_lens[t] > 0, every query head h and split s < attention_cascade_splits(prefix_lens[t],
/// cascade_max_splits), writes cascade_partial[t, h, s, :] = [acc(head_dim), m, l] over that split of
/// the prefix keys (scores scaled and soft-capped as attention() does; q rotated when rotary_append).
/// Rows of a block sharing (prefix_slots, prefix_lens) read each key once. Launched with programmatic
/// dependent launch; attention_decode() calls it before the decode kernel. Throws Error when
/// !attention_cascade_supported(p).
void attention_cascade_prefix(const AttentionParams& p, cudaStream_t stream);

}  // namespace tpshard::cuda
