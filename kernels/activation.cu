// activation.cu: MLP activations, gated or plain (see activation.cuh).
#include <algorithm>

#include "kernels/activation.cuh"
#include "kernels/activation_fn.cuh"
#include "kernels/common.cuh"

namespace tpshard::cuda {
namespace {

template <typename T>
__global__ void activation_kernel(ActivationParams p) {
  const int64_t total = static_cast<int64_t>(p.n) * p.width;
  const T* in = static_cast<const T*>(p.in);
  const T* bias = static_cast<const T*>(p.bias);
  T* out = static_cast<T*>(p.out);
  for (int64_t k = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; k < total;
       k += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = k / p.width;
    const int i = static_cast<int>(k % p.width);
    if (p.gated) {
      const T* row = in + t * 2 * p.width;
      float g = to_f32(row[i]), u = to_f32(row[p.width + i]);
      if (bias) {
        g += to_f32(bias[i]);
        u += to_f32(bias[p.width + i]);
      }
      out[k] = from_f32<T>(apply_act(g, p.act) * u);
    } else {
      float x = to_f32(in[k]);
      if (bias) x += to_f32(bias[i]);
      out[k] = from_f32<T>(apply_act(x, p.act));
    }
  }
}

}  // namespace

void activation(const ActivationParams& p, cudaStream_t stream) {
  const int64_t total = static_cast<int64_t>(p.n) * p.width;
  if (total == 0) return;
  const int blocks = static_cast<int>(std::min<int64_t>((total + 255) / 256, 65535));
  TPS_DISPATCH_DTYPE(p.dtype, T, activation_kernel<T><<<blocks, 256, 0, stream>>>(p));
  check_launch("activation_kernel");
}

}  // namespace tpshard::cuda
