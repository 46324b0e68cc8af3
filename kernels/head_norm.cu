// head_norm.cu: per-head RMSNorm in place (see head_norm.cuh). One warp per (token, head): each lane
// squares and sums its dims, a butterfly sum gives the mean, then each lane scales its dims.
#include <string>

#include "format/error.h"
#include "kernels/common.cuh"
#include "kernels/head_norm.cuh"

namespace tpshard::cuda {
namespace {

constexpr int kWarpsPerBlock = 4;

template <typename T>
__global__ void head_rms_norm_kernel(HeadNormParams p) {
  const int heads = p.num_heads + p.num_kv_heads;
  const int64_t pair = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  if (pair >= static_cast<int64_t>(p.n) * heads) return;
  const int lane = threadIdx.x % 32;
  const int64_t t = pair / heads;
  const int h = static_cast<int>(pair % heads);
  T* x = static_cast<T*>(p.qkv) + t * p.row_stride + static_cast<int64_t>(h) * p.head_dim;
  const T* w = static_cast<const T*>(h < p.num_heads ? p.q_weight : p.k_weight);
  float ss = 0.f;
  for (int d = lane; d < p.head_dim; d += 32) {
    const float v = to_f32(x[d]);
    ss += v * v;
  }
  ss = warp_sum(ss);
  const float inv = rsqrtf(ss / static_cast<float>(p.head_dim) + p.eps);
  for (int d = lane; d < p.head_dim; d += 32) x[d] = from_f32<T>(to_f32(w[d]) * (to_f32(x[d]) * inv));
}

}  // namespace

void head_rms_norm(const HeadNormParams& p, cudaStream_t stream) {
  TPS_CHECK(p.head_dim >= 1 && p.head_dim <= 1024, "kernels/head_norm: head_dim " + std::to_string(p.head_dim) + " unsupported",
            "head_dim must be 1..1024");
  const int64_t pairs = static_cast<int64_t>(p.n) * (p.num_heads + p.num_kv_heads);
  if (pairs == 0) return;
  const int blocks = static_cast<int>((pairs + kWarpsPerBlock - 1) / kWarpsPerBlock);
  TPS_DISPATCH_DTYPE(p.dtype, T, head_rms_norm_kernel<T><<<blocks, 32 * kWarpsPerBlock, 0, stream>>>(p));
  check_launch("head_rms_norm_kernel");
}

}  // namespace tpshard::cuda
