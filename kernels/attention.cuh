// attention.cuh: causal multi-head attention of new tokens over the kv_cache, for prefill and decode
// in one kernel. Tokens of different sequences are packed without padding: token t belongs to kv_cache
// slot slots[t] at position positions[t] and attends to positions 0..positions[t] of that slot (its
// own K/V must be appended first, see kv_cache.cuh), or with a local window w only to the positions
// positions[t] - w < j <= positions[t] (GPT-Neo local layers). GQA: local Q head h reads local KV head
// (h + head_offset) / kv_group (attention_kv_head), which also covers a rank whose heads start inside a KV group.
// Softmax in fp32 with the online (running max) formulation of FlashAttention (arXiv:2205.14135);
// split-K over the key range (flash-decoding) when there are too few (token, head) pairs to fill the GPU.
#pragma once
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "format/dtype.h"
#include "kernels/kv_cache.cuh"

namespace tpshard::cuda {

struct AttentionParams {
  const void* q = nullptr;          ///< [n, q_stride] of dtype; Q head h at columns h*head_dim.. (the QKV row)
  int64_t q_stride = 0;
  const void* k_cache = nullptr;    ///< [slots, kv_heads, kv_positions, head_dim] of dtype (one layer; kv_cache.cuh)
  const void* v_cache = nullptr;
  const int32_t* slots = nullptr;      ///< [n] device
  const int32_t* positions = nullptr;  ///< [n] device; keys 0..positions[t] are attended
  /// Shared prefix (optional, both or neither): keys j < prefix_lens[t] of token t are read from slot
  /// prefix_slots[t] instead of slots[t] (runtime/model_runner.h SeqChunk::prefix_slot); prefix_lens[t]
  /// <= positions[t]. [n] device; a token without one has prefix_lens 0.
  const int32_t* prefix_slots = nullptr;
  const int32_t* prefix_lens = nullptr;
  /// Cascade decode attention (optional; kernels/attention_cascade.cuh): [n, num_heads,
  /// cascade_max_splits, head_dim + 2] f32 workspace of the prefix partials. When set on a decode step
  /// that attention_cascade_supported() accepts, the prefix keys of the tokens with prefix_lens > 0 are
  /// read once per block of rows sharing them and merged into the decode kernel's result. nullptr: the
  /// decode kernel reads each token's prefix itself.
  float* cascade_partial = nullptr;
  int cascade_max_splits = 0;       ///< prefix splits cascade_partial holds per (token, head)
  /// Query tiles (optional, prefill steps; runtime/query_tiles.h): [num_q_tiles] device, tile k covers
  /// tokens q_tiles[k] .. q_tiles[k + 1] - 1 (the last tile up to n - 1), consecutive positions of one
  /// slot with one shared prefix, at most kPrefillTileRows (attention_prefill.cuh). When given,
  /// attention() runs the tensor-core prefill kernel where it supports the shape.
  const int32_t* q_tiles = nullptr;
  int num_q_tiles = 0;
  void* out = nullptr;              ///< [n, heads * head_dim] of dtype
  float* partial = nullptr;         ///< split-K workspace: n * heads * num_splits * (head_dim + 2) f32 (only when num_splits > 1)
  /// Optional, split-K only: [n * heads] int32, all ZERO before the call (and left zero after it). When
  /// given, the last block to finish a (token, head) merges the partials itself (a counter per pair)
  /// instead of a second combine kernel.
  int* split_counters = nullptr;
  DType dtype = DType::F16;
  int n = 0;
  int num_heads = 0;
  int num_kv_heads = 0;
  /// Query heads per KV head of the whole model (0: num_heads / num_kv_heads, the even split).
  int kv_group = 0;
  /// The rank's first query head modulo kv_group: its local Q head 0 is that far into its first KV group
  /// (uneven tensor parallelism, model/parallel_layout.h). 0 for even splits.
  int head_offset = 0;
  int head_dim = 0;                 ///< <= 256
  int max_seq_len = 0;              ///< positions[t] < max_seq_len
  int kv_positions = 0;             ///< rows per (slot, kv head) of the cache; 0: max_seq_len (kv_row: a ring when fewer)
  int num_splits = 1;               ///< key-range pieces per (token, head); each covers ceil(len / num_splits) keys
  float scale = 0.f;                ///< softmax scale, normally 1/sqrt(head_dim) (GPT-Neo: 1)
  /// > 0: every scaled score s becomes softcap * tanh(s / softcap) before the softmax (Gemma 2's
  /// attn_logit_softcapping; attention_softcap()); 0: none.
  float softcap = 0.f;
  int window = 0;                   ///< > 0: local attention over the last `window` positions; 0: all
  // Decode fusion (rotary_append = true): q is the UNROTATED QKV row, K and V of token t are read from
  // the same row (K heads at num_heads*head_dim, V heads after them), rotated like apply_rotary
  // (rotary.cuh) and written to the kv_cache at positions[t] by the blocks whose key range holds that
  // position, which then attend over it: one kernel instead of rotary + kv_cache_append + attention.
  // Requires that no two tokens of the step share a slot (decode: one token per sequence) except the
  // scratch slot, whose contents are never read for real tokens. Rounding matches the unfused path.
  bool rotary_append = false;
  const float* inv_freq = nullptr;  ///< [rotary_ndims/2] f32 (rotary_append)
  int rotary_ndims = 0;             ///< even, <= head_dim; 0: no rotary (rotary_append)
  float rotary_attention_factor = 1.0f;  ///< multiplies cos and sin (rotary_append; RotaryParams::attention_factor)
  /// Every token is the only query token of its sequence in this call (a decode step): attention() uses
  /// the decode kernel (attention_decode.cuh). rotary_append implies it. Results are the same within
  /// fp32 rounding either way.
  bool decode = false;
};

/// out[t, h, :] = sum_j softmax_j(cap(scale * q[t,h] . k[s_j, h/g, j])) v[s_j, h/g, j], j <= positions[t]
/// (and j > positions[t] - window when window > 0); s_j = prefix_slots[t] for j < prefix_lens[t], else slots[t];
/// cap = attention_softcap (the identity when softcap is 0).
/// Launched with programmatic dependent launch (kernels/pdl.cuh). Decode steps (decode or rotary_append)
/// go to attention_decode() when it supports the shape; steps with query tiles to attention_prefill()
/// (attention_prefill.cuh) when it supports the shape; everything else to attention_tiled().
void attention(const AttentionParams& p, cudaStream_t stream);

/// The general kernel (prefill and decode): one block per (token, head, split), keys in tiles of 128
/// with block-wide max / sum per tile.
void attention_tiled(const AttentionParams& p, cudaStream_t stream);

/// A scaled score soft-capped as transformers' eager_attention_forward does it (modeling_gemma2.py:
/// s / softcap, tanh, * softcap); s itself when softcap is 0. Applied per score, before the running max,
/// so split-K partials and their merges need no change.
__host__ __device__ inline float attention_softcap(float s, float softcap) {
  return softcap > 0.f ? tanhf(s / softcap) * softcap : s;
}

/// The local KV head read by local Q head h (see AttentionParams::kv_group / head_offset).
__host__ __device__ inline int attention_kv_head(const AttentionParams& p, int h) {
  const int group = p.kv_group > 0 ? p.kv_group : p.num_heads / p.num_kv_heads;
  return (h + p.head_offset) / group;
}

/// Positions of token t read from its shared prefix's slot (0: none).
__device__ inline int attention_prefix_len(const AttentionParams& p, int t) {
  return p.prefix_lens ? p.prefix_lens[t] : 0;
}

/// First key attended by a query at position pos: 0, or pos + 1 - window on a local layer.
__host__ __device__ inline int attention_first_key(int pos, int window) {
  return window > 0 && pos + 1 > window ? pos + 1 - window : 0;
}

/// Rows per (slot, kv head) of p's kv_cache.
__host__ __device__ inline int attention_cache_rows(const AttentionParams& p) {
  return p.kv_positions > 0 ? p.kv_positions : p.max_seq_len;
}

/// Throws Error when p breaks the contract above (head_dim, heads / kv_heads, partial, rotary_append).
void attention_validate(const AttentionParams& p);

/// A num_splits that fills the GPU for n tokens (1 when n * heads already does), at most max_splits.
int attention_num_splits(int n, int num_heads, int max_context, int max_splits);

}  // namespace tpshard::cuda
