// attention_prefill.cuh: causal attention of a prefill step on tensor cores, FlashAttention-2's scheme
// (Dao, arXiv:2307.08691): one block per (query tile, head); a tile is up to kPrefillTileRows consecutive
// tokens of one sequence (runtime/query_tiles.h), so the block loads each key/value tile of that
// sequence once into shared memory for all its queries; scores and outputs in fp32 from mma.sync
// m16n8k16 (f16/bf16 inputs), the softmax online with a running max per row, probabilities rounded to
// the storage dtype for the P.V product (as FlashAttention does). Same contract as attention()
// (attention.cuh): GQA mapping, shared prefix slots, local window, softcap, kv_cache ring rows.
#pragma once
#include <cuda_runtime.h>

#include "kernels/attention.cuh"

namespace tpshard::cuda {

/// Query rows per tile (4 warps x 16 rows); runtime/query_tiles.h splits longer runs.
constexpr int kPrefillTileRows = 64;

/// Whether attention_prefill() handles p: f16 / bf16, head_dim 64, 80, 96, 128 or 256, query tiles given
/// (AttentionParams::q_tiles), not a decode step. Otherwise attention() uses attention_tiled().
bool attention_prefill_supported(const AttentionParams& p);

/// out for every token of p's query tiles (see attention() for the formula). Throws Error when
/// attention_prefill_supported(p) is false or p breaks attention_validate().
void attention_prefill(const AttentionParams& p, cudaStream_t stream);

}  // namespace tpshard::cuda
