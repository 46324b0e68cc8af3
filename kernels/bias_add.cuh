// bias_add.cuh: x[t, :] += bias (column-parallel projections with bias: QKV of GPT-NeoX / Qwen2).
#pragma once
#include <cuda_runtime.h>

#include "format/dtype.h"

namespace tpshard::cuda {

/// x [n, width] of x_dtype (dtype, or F32: logits), in place; bias [width] of dtype. The sum is rounded
/// once to x_dtype.
void bias_add(void* x, const void* bias, int n, int width, DType dtype, cudaStream_t stream, DType x_dtype);

/// bias_add with x of the bias's dtype.
inline void bias_add(void* x, const void* bias, int n, int width, DType dtype, cudaStream_t stream) {
  bias_add(x, bias, n, width, dtype, stream, dtype);
}

}  // namespace tpshard::cuda
