// moe.cuh: the mixture-of-experts kernels around the experts' GEMMs (transformers' modeling_mixtral.py
// MixtralSparseMoeBlock): routing (softmax of the router logits, top_k, renormalized), the permutation
// that groups each expert's tokens (counts, prefix sums of the counts, one row per (token, k) entry),
// the gather of the tokens' rows into that order, and the weighted sums of the experts' outputs back
// per token. The same definitions on the host: model/moe_routing.h. Every launch is an ordinary
// stream launch without host synchronization (capturable in a CUDA graph).
// Does not own: the experts' GEMMs and the order of the steps (kernels/moe_block.cuh).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "format/dtype.h"

namespace tpshard::cuda {

/// The most experts the routing kernels take (one bit per expert and lane of a warp's mask).
constexpr int kMoeMaxExperts = 1024;

/// Per token t: p = softmax(logits[t]) over `experts` (f32), the top_k largest (the lower expert id
/// first among equal values), renormalized to sum 1 (model/moe_routing.h route_top_k).
/// logits [n, experts] f32; ids, weights [n, top_k] (expert ids, in decreasing p; f32 weights).
/// 1 <= top_k <= experts <= kMoeMaxExperts. Throws Error on bad sizes or a failed launch.
void moe_route(const float* logits, int n, int experts, int top_k, int32_t* ids, float* weights, cudaStream_t stream);

/// Groups the `entries` routing entries ids[entries] (entry i: token i / top_k) by expert, as
/// model/moe_routing.h moe_permutation: offsets [experts + 1] (each a multiple of kMoeRowAlign; the
/// last is the end of the layout), counts [experts], slots [entries] (each entry's row in the permuted
/// layout; stable within an expert). One block; ids must be in 0..experts-1. Throws Error on bad sizes
/// or a failed launch.
void moe_permute(const int32_t* ids, int entries, int experts, int32_t* offsets, int32_t* counts, int32_t* slots,
                 cudaStream_t stream);

/// gathered[slots[i]] = x[i / top_k] for i < n * top_k: rows of `hidden` elements of dtype. Rows of the
/// permuted layout that no entry maps to are left as they are.
void moe_gather(const void* x, const int32_t* slots, int n, int top_k, int hidden, DType dtype, void* gathered,
                cudaStream_t stream);

/// out[t] = sum over t's entries, in increasing expert id, of weights[entry] * expert_out[slots[entry]]
/// (f32 sums, each product and sum rounded as on the CPU; one rounding to dtype at the end).
/// expert_out [permuted rows, hidden] and out [n, hidden] of dtype; ids / weights / slots [n, top_k].
void moe_combine(const void* expert_out, const int32_t* ids, const float* weights, const int32_t* slots, int n,
                 int top_k, int hidden, DType dtype, void* out, cudaStream_t stream);

/// For the tokens routed to `expert`: acc[t] += weight(t, expert) * y[t] (f32; y [n, hidden] of dtype,
/// expert's output for every token, the rows of tokens not routed to it are not read). acc [n, hidden].
void moe_accumulate(int expert, const void* y, const int32_t* ids, const float* weights, int n, int top_k,
                    int hidden, DType dtype, float* acc, cudaStream_t stream);

/// out = acc rounded to dtype; acc, out [count] elements.
void moe_store(const float* acc, int64_t count, DType dtype, void* out, cudaStream_t stream);

}  // namespace tpshard::cuda
