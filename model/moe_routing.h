// moe_routing.h: the host-side definition of mixture-of-experts routing (transformers'
// modeling_mixtral.py MixtralSparseMoeBlock) shared by the CPU backend and the CUDA kernels' tests:
// each token's top_k experts and weights, and the permutation that groups the (token, k) routing
// entries by expert so that each expert runs one product over its tokens. kernels/moe.cuh computes the
// same permutation on the GPU. CUDA-free.
#pragma once
#include <cstdint>
#include <vector>

namespace tpshard {

/// Mixture-of-experts routing of one token (modeling_mixtral.py MixtralTopKRouter): p = softmax(logits)
/// over n_experts (f32), the k largest (the lower expert id first among equal values, as torch.topk on
/// CPU), renormalized to sum 1. logits [n_experts]; ids, weights [k], in decreasing p. 1 <= k <= n_experts.
void route_top_k(const float* logits, int64_t n_experts, int64_t k, int32_t* ids, float* weights);

/// The first row of each expert's group in the permuted layout is a multiple of this many rows, so that
/// every expert's rows start 256-byte aligned for the GEMM (hidden a multiple of 8, 2-byte dtypes).
constexpr int64_t kMoeRowAlign = 16;

/// Rows of the permuted layout for `entries` routing entries over `experts` experts: each expert's group
/// rounded up to kMoeRowAlign rows.
inline int64_t moe_permuted_rows(int64_t entries, int64_t experts) { return entries + experts * (kMoeRowAlign - 1); }

/// The routing entries (entry i = token i / top_k, its (i % top_k)-th expert) grouped by expert.
struct MoePermutation {
  /// [experts + 1]: expert e's rows are offsets[e] .. offsets[e] + counts[e]; offsets[e] is a multiple of
  /// kMoeRowAlign, offsets[experts] = the end of the last group (rounded up as well).
  std::vector<int32_t> offsets;
  std::vector<int32_t> counts;  ///< [experts]: routing entries of each expert
  /// [entries]: the permuted row of each entry; within an expert's group the entries keep their order
  /// (token order, since a token lists an expert at most once).
  std::vector<int32_t> slots;
};

/// The permutation of `entries` routing entries ids[entries] (expert ids in 0..experts-1; throws
/// std::out_of_range for others).
MoePermutation moe_permutation(const int32_t* ids, int64_t entries, int64_t experts);

}  // namespace tpshard
