// rotary.cuh: rotary position embedding (RoFormer, arXiv:2104.09864) applied in place to the Q and K
// heads of the fused QKV activation, Hugging Face rotate_half convention: within the first
// rotary_ndims dims of each head, dim i pairs with dim i + rotary_ndims/2 (partial rotary for GPT-NeoX).
// The inv_freq table is computed on the host by runtime/rope.h (one table for every backend).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "format/dtype.h"
#include "model/model_config.h"

namespace tpshard::cuda {

struct RotaryParams {
  void* qkv = nullptr;              ///< [n, row_stride] of dtype, device; Q heads then K heads at column 0
  int64_t row_stride = 0;           ///< elements per token row ((heads + 2*kv_heads) * head_dim)
  const int32_t* positions = nullptr;  ///< [n] absolute positions, device
  const float* inv_freq = nullptr;  ///< [rotary_ndims/2] f32, device
  DType dtype = DType::F16;
  int n = 0;
  int num_heads = 0;                ///< Q heads in the row (this rank's)
  int num_kv_heads = 0;             ///< K heads in the row, right after the Q heads
  int head_dim = 0;
  int rotary_ndims = 0;             ///< even, <= head_dim
  float attention_factor = 1.0f;    ///< multiplies cos and sin (ModelConfig::rope_attention_factor)
};

/// For each token t, each Q and K head, i < rotary_ndims/2, angle a = positions[t] * inv_freq[i] (fp32):
///   x1' = x1 cos a - x2 sin a,   x2' = x2 cos a + x1 sin a,   x1 = x[i], x2 = x[i + rotary_ndims/2],
/// with cos a and sin a multiplied by attention_factor (exact when 1).
void apply_rotary(const RotaryParams& p, cudaStream_t stream);

}  // namespace tpshard::cuda
