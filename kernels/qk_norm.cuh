// qk_norm.cuh: RMSNorm of each token's whole Q projection and whole K projection (all heads together),
// in place in the QKV rows, after the projection and before rotary (OLMo 2's q_norm / k_norm over
// num_heads * head_dim: transformers modeling_olmo2.py Olmo2Attention). Under tensor parallelism a rank
// holds some heads only, so the norm is two kernels around an all_reduce of per-token sums of squares:
// qk_sum_squares (this rank's part), the caller's all_reduce of sums [n, 2] f32, then qk_norm_apply.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "format/dtype.h"

namespace tpshard::cuda {

struct QkNormParams {
  void* qkv = nullptr;   ///< [n, row_stride] of dtype: the rank's Q heads | K heads | V heads (V untouched)
  int64_t row_stride = 0;
  float* sums = nullptr;  ///< [n, 2] f32: sum of squares of the whole Q, of the whole K
  const void* q_weight = nullptr;  ///< [q_total] of dtype: the whole weight (num_heads_total * head_dim)
  const void* k_weight = nullptr;  ///< [k_total] of dtype
  DType dtype = DType::F16;
  int n = 0;
  int num_heads = 0;      ///< Q heads in a row (this rank's)
  int num_kv_heads = 0;   ///< K heads after them (this rank's, replicated ones included)
  int head_dim = 0;
  int q_offset = 0;       ///< first Q head's index among all heads (weights offset q_offset * head_dim)
  int k_offset = 0;       ///< first K head's index among all KV heads
  /// The K heads, among the row's, that this rank counts in the sum (ParallelLayout::owned_kv_heads,
  /// relative to the row's first K head): [k_count_begin, k_count_end).
  int k_count_begin = 0, k_count_end = 0;
  int q_total = 0;        ///< elements of the whole Q projection (num_attention_heads * head_dim)
  int k_total = 0;        ///< of the whole K projection (num_key_value_heads * head_dim)
  float eps = 1e-6f;
};

/// sums[t] = {sum of squares of row t's Q values, of its counted K heads' values} (f32; one block per token).
void qk_sum_squares(const QkNormParams& p, cudaStream_t stream);

/// With sums holding every rank's total: Q <- q_weight[q_offset hd + i] * Q / sqrt(sums[t][0] / q_total +
/// eps), K likewise with k_weight and sums[t][1]; f32 arithmetic, one rounding to dtype.
void qk_norm_apply(const QkNormParams& p, cudaStream_t stream);

}  // namespace tpshard::cuda
