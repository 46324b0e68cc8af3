// kv_cache.cu: append K/V of new tokens to the kv_cache (see kv_cache.cuh).
#include "kernels/common.cuh"
#include "kernels/kv_cache.cuh"

namespace tpshard::cuda {
namespace {

template <typename T>
__global__ void kv_append_kernel(KvAppendParams p) {
  const int t = blockIdx.x;
  const T* row = static_cast<const T*>(p.qkv) + static_cast<int64_t>(t) * p.row_stride;
  const T* k = row + static_cast<int64_t>(p.num_heads) * p.head_dim;
  const T* v = k + static_cast<int64_t>(p.num_kv_heads) * p.head_dim;
  const int rows = p.kv_positions > 0 ? p.kv_positions : p.max_seq_len;
  const int64_t slot = p.slots[t], row_at = kv_row(p.positions[t], rows);
  const int total = p.num_kv_heads * p.head_dim;
  for (int k_i = threadIdx.x; k_i < total; k_i += blockDim.x) {
    const int j = k_i / p.head_dim, d = k_i % p.head_dim;
    const int64_t dst = ((slot * p.num_kv_heads + j) * rows + row_at) * p.head_dim + d;
    static_cast<T*>(p.k_cache)[dst] = k[k_i];
    static_cast<T*>(p.v_cache)[dst] = v[k_i];
  }
}

}  // namespace

void kv_cache_append(const KvAppendParams& p, cudaStream_t stream) {
  if (p.n == 0) return;
  TPS_DISPATCH_DTYPE(p.dtype, T, kv_append_kernel<T><<<p.n, 256, 0, stream>>>(p));
  check_launch("kv_append_kernel");
}

}  // namespace tpshard::cuda
