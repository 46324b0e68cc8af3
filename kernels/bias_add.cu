// bias_add.cu: row-broadcast bias add (see bias_add.cuh).
#include <algorithm>

#include "kernels/bias_add.cuh"
#include "kernels/common.cuh"

namespace tpshard::cuda {
namespace {

template <typename X, typename T>
__global__ void bias_add_kernel(X* x, const T* bias, int64_t total, int width) {
  for (int64_t k = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; k < total;
       k += static_cast<int64_t>(gridDim.x) * blockDim.x)
    x[k] = from_f32<X>(to_f32(x[k]) + to_f32(bias[k % width]));
}

}  // namespace

void bias_add(void* x, const void* bias, int n, int width, DType dtype, cudaStream_t stream, DType x_dtype) {
  const int64_t total = static_cast<int64_t>(n) * width;
  if (total == 0) return;
  const int blocks = static_cast<int>(std::min<int64_t>((total + 255) / 256, 65535));
  if (x_dtype == DType::F32) {
    TPS_DISPATCH_DTYPE(dtype, T,
                       bias_add_kernel<float, T><<<blocks, 256, 0, stream>>>(static_cast<float*>(x),
                                                                             static_cast<const T*>(bias), total, width));
  } else {
    TPS_CHECK(x_dtype == dtype, "kernels/bias_add: x must be of the bias's dtype or F32", "this is a bug in the caller");
    TPS_DISPATCH_DTYPE(dtype, T,
                       bias_add_kernel<T, T><<<blocks, 256, 0, stream>>>(static_cast<T*>(x), static_cast<const T*>(bias),
                                                                         total, width));
  }
  check_launch("bias_add_kernel");
}

}  // namespace tpshard::cuda
