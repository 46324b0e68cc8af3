// bias_add.cuh: x[t, :] += bias (column-parallel projections with bias: QKV of GPT-NeoX / Qwen2).
#pragma once
#include <cuda_runtime.h>

#include "format/dtype.h"

namespace tpshard::cuda {

/// x [n, width] of dtype, in place; bias [width] of dtype. The sum is rounded once to dtype.
void bias_add(void* x, const void* bias, int n, int width, DType dtype, cudaStream_t stream);

}  // namespace tpshard::cuda
