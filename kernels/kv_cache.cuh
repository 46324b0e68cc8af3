// kv_cache.cuh: layout of the kv_cache and the kernel that appends new tokens' K and V to it.
// Layout per layer: k_cache, v_cache [slots, kv_heads, kv_positions, head_dim] of the activation
// dtype, so attention reads each (slot, kv head) as one contiguous [positions, head_dim] matrix.
// kv_positions is max_seq_len, or on a local (windowed) layer a ring of fewer rows: position p is
// stored at row p % kv_positions (model/kv_ring.h says how many and why no live key is overwritten).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "format/dtype.h"

namespace tpshard::cuda {

struct KvAppendParams {
  const void* qkv = nullptr;        ///< [n, row_stride] of dtype: Q heads | K heads | V heads (K already rotated)
  int64_t row_stride = 0;
  void* k_cache = nullptr;          ///< [slots, kv_heads, kv_positions, head_dim] of dtype (one layer)
  void* v_cache = nullptr;
  const int32_t* slots = nullptr;      ///< [n] kv_cache slot of each token, device
  const int32_t* positions = nullptr;  ///< [n] position of each token, device (< max_seq_len)
  DType dtype = DType::F16;
  int n = 0;
  int num_heads = 0;                ///< Q heads in the row (K starts at num_heads * head_dim)
  int num_kv_heads = 0;
  int head_dim = 0;
  int max_seq_len = 0;
  int kv_positions = 0;             ///< rows per (slot, kv head); 0: max_seq_len (no ring)
};

/// Row of position j in a (slot, kv head) matrix of kv_positions rows: j, or j % kv_positions on a ring.
__host__ __device__ inline int64_t kv_row(int j, int kv_positions) { return j < kv_positions ? j : j % kv_positions; }

/// k_cache[slot[t], j, kv_row(pos[t]), :] = K head j of token t; the same for V.
void kv_cache_append(const KvAppendParams& p, cudaStream_t stream);

}  // namespace tpshard::cuda
