// qk_norm.cu: whole-projection q/k RMSNorm (see qk_norm.cuh). One block per token.
#include <string>

#include "format/error.h"
#include "kernels/common.cuh"
#include "kernels/qk_norm.cuh"

namespace tpshard::cuda {
namespace {

constexpr int kThreads = 256;

template <typename T>
__global__ void qk_sum_squares_kernel(QkNormParams p) {
  __shared__ float scratch[32];
  const int64_t t = blockIdx.x;
  const T* row = static_cast<const T*>(p.qkv) + t * p.row_stride;
  const int q_n = p.num_heads * p.head_dim;
  float sq = 0.f, sk = 0.f;
  for (int i = threadIdx.x; i < q_n; i += blockDim.x) {
    const float v = to_f32(row[i]);
    sq += v * v;
  }
  const T* k = row + q_n + static_cast<int64_t>(p.k_count_begin) * p.head_dim;
  const int k_n = (p.k_count_end - p.k_count_begin) * p.head_dim;
  for (int i = threadIdx.x; i < k_n; i += blockDim.x) {
    const float v = to_f32(k[i]);
    sk += v * v;
  }
  sq = block_sum(sq, scratch);
  sk = block_sum(sk, scratch);
  if (threadIdx.x == 0) {
    p.sums[2 * t] = sq;
    p.sums[2 * t + 1] = sk;
  }
}

template <typename T>
__global__ void qk_norm_apply_kernel(QkNormParams p) {
  const int64_t t = blockIdx.x;
  T* row = static_cast<T*>(p.qkv) + t * p.row_stride;
  const float rq = rsqrtf(p.sums[2 * t] / static_cast<float>(p.q_total) + p.eps);
  const float rk = rsqrtf(p.sums[2 * t + 1] / static_cast<float>(p.k_total) + p.eps);
  const T* wq = static_cast<const T*>(p.q_weight) + static_cast<int64_t>(p.q_offset) * p.head_dim;
  const T* wk = static_cast<const T*>(p.k_weight) + static_cast<int64_t>(p.k_offset) * p.head_dim;
  const int q_n = p.num_heads * p.head_dim, k_n = p.num_kv_heads * p.head_dim;
  for (int i = threadIdx.x; i < q_n; i += blockDim.x) row[i] = from_f32<T>(to_f32(wq[i]) * (to_f32(row[i]) * rq));
  for (int i = threadIdx.x; i < k_n; i += blockDim.x)
    row[q_n + i] = from_f32<T>(to_f32(wk[i]) * (to_f32(row[q_n + i]) * rk));
}

void check(const QkNormParams& p) {
  TPS_CHECK(p.q_total > 0 && p.k_total > 0 && p.k_count_begin >= 0 && p.k_count_begin <= p.k_count_end &&
                p.k_count_end <= p.num_kv_heads,
            "kernels/qk_norm: totals " + std::to_string(p.q_total) + " / " + std::to_string(p.k_total) +
                " or counted K heads [" + std::to_string(p.k_count_begin) + ", " + std::to_string(p.k_count_end) +
                ") of " + std::to_string(p.num_kv_heads) + " invalid",
            "this is a bug in the caller");
}

}  // namespace

void qk_sum_squares(const QkNormParams& p, cudaStream_t stream) {
  check(p);
  if (p.n == 0) return;
  TPS_DISPATCH_DTYPE(p.dtype, T, qk_sum_squares_kernel<T><<<p.n, kThreads, 0, stream>>>(p));
  check_launch("qk_sum_squares_kernel");
}

void qk_norm_apply(const QkNormParams& p, cudaStream_t stream) {
  check(p);
  if (p.n == 0) return;
  TPS_DISPATCH_DTYPE(p.dtype, T, qk_norm_apply_kernel<T><<<p.n, kThreads, 0, stream>>>(p));
  check_launch("qk_norm_apply_kernel");
}

}  // namespace tpshard::cuda
