// rotary.cu: rotary position embedding on Q and K (see rotary.cuh).
#include <cmath>

#include "kernels/attention_rotary.cuh"
#include "kernels/common.cuh"
#include "kernels/rotary.cuh"

namespace tpshard::cuda {

namespace {

template <typename T>
__global__ void rotary_kernel(RotaryParams p) {
  const int t = blockIdx.x;
  const int half = p.rotary_ndims / 2;
  const float pos = static_cast<float>(p.positions[t]);
  T* row = static_cast<T*>(p.qkv) + static_cast<int64_t>(t) * p.row_stride;
  const int pairs = (p.num_heads + p.num_kv_heads) * half;
  for (int k = threadIdx.x; k < pairs; k += blockDim.x) {
    const int head = k / half, i = k % half;
    T* x = row + static_cast<int64_t>(head) * p.head_dim;
    float s, c;
    rotary_cos_sin(pos * p.inv_freq[i], p.attention_factor, &c, &s);
    const float x1 = to_f32(x[i]), x2 = to_f32(x[i + half]);
    x[i] = from_f32<T>(rotary_first(x1, x2, c, s));  // attention_rotary.cuh: the fused kernels round alike
    x[i + half] = from_f32<T>(rotary_second(x1, x2, c, s));
  }
}

}  // namespace

void apply_rotary(const RotaryParams& p, cudaStream_t stream) {
  if (p.n == 0 || p.rotary_ndims == 0) return;
  TPS_CHECK(p.rotary_ndims % 2 == 0 && p.rotary_ndims <= p.head_dim,
            "kernels/apply_rotary: rotary_ndims " + std::to_string(p.rotary_ndims) + " must be even and <= head_dim " +
                std::to_string(p.head_dim),
            "check rotary_pct / partial_rotary_factor in the model config");
  TPS_DISPATCH_DTYPE(p.dtype, T, rotary_kernel<T><<<p.n, 256, 0, stream>>>(p));
  check_launch("rotary_kernel");
}

}  // namespace tpshard::cuda
