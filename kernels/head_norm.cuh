// head_norm.cuh: RMSNorm of each attention head over head_dim, in place in the QKV rows (Qwen3's q_norm
// and k_norm, applied after the projection and before rotary: transformers modeling_qwen3.py).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "format/dtype.h"

namespace tpshard::cuda {

struct HeadNormParams {
  void* qkv = nullptr;             ///< [n, row_stride] of dtype: Q heads | K heads | V heads (V untouched)
  int64_t row_stride = 0;
  const void* q_weight = nullptr;  ///< [head_dim] of dtype
  const void* k_weight = nullptr;  ///< [head_dim] of dtype
  DType dtype = DType::F16;
  int n = 0;
  int num_heads = 0;     ///< Q heads in a row
  int num_kv_heads = 0;  ///< K heads after them
  int head_dim = 0;      ///< <= 1024
  float eps = 1e-6f;
};

/// For each token t and head h < num_heads + num_kv_heads: x = row t's head h (Q heads, then K heads),
/// x <- w * x / sqrt(mean(x^2) + eps), w = q_weight for Q heads, k_weight for K heads; f32 arithmetic,
/// one rounding to dtype. Throws Error for head_dim outside 1..1024.
void head_rms_norm(const HeadNormParams& p, cudaStream_t stream);

}  // namespace tpshard::cuda
