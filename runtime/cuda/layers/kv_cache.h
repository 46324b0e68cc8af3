// kv_cache.h: the device kv_cache of one rank, allocated once: per layer k and v of
// [slots, kv_heads_per_rank, max_seq_len, head_dim] in the activation dtype (kernels/kv_cache.cuh).
// Slot `max_batch` is a scratch slot that padding tokens of CUDA-graph buckets write into.
#pragma once
#include <cstddef>

#include "format/dtype.h"

namespace tpshard::cuda {

class KvCache {
 public:
  /// Throws Error with needed and free bytes when the cache does not fit in free device memory.
  KvCache(int layers, int slots, int kv_heads, int max_seq_len, int head_dim, DType dtype);
  ~KvCache();
  KvCache(const KvCache&) = delete;
  KvCache& operator=(const KvCache&) = delete;

  void* k(int layer) const { return static_cast<char*>(base_) + (2 * static_cast<size_t>(layer)) * layer_bytes_; }
  void* v(int layer) const { return static_cast<char*>(base_) + (2 * static_cast<size_t>(layer) + 1) * layer_bytes_; }
  size_t bytes() const { return bytes_; }

 private:
  void* base_ = nullptr;
  size_t layer_bytes_ = 0;  ///< bytes of one layer's k (or v)
  size_t bytes_ = 0;
};

}  // namespace tpshard::cuda
