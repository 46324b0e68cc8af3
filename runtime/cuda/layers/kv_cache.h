// kv_cache.h: the device kv_cache of one rank, allocated once: per layer k and v of
// [slots, kv_heads_per_rank, positions, head_dim] in the activation dtype (kernels/kv_cache.cuh), where
// positions is max_seq_len or a local layer's ring (model/kv_ring.h).
// Slot `max_batch` is a scratch slot that padding tokens of CUDA-graph buckets write into.
#pragma once
#include <cstddef>
#include <vector>

#include "format/dtype.h"

namespace tpshard::cuda {

class KvCache {
 public:
  /// layer_positions[l]: positions per slot of the stage's l-th layer. Throws Error with needed and free
  /// bytes when the cache does not fit in free device memory.
  KvCache(const std::vector<int>& layer_positions, int slots, int kv_heads, int head_dim, DType dtype);
  ~KvCache();
  KvCache(const KvCache&) = delete;
  KvCache& operator=(const KvCache&) = delete;

  void* k(int layer) const { return static_cast<char*>(base_) + offsets_[static_cast<size_t>(layer)]; }
  void* v(int layer) const { return static_cast<char*>(k(layer)) + layer_bytes_[static_cast<size_t>(layer)]; }
  /// Positions per slot of the stage's layer (the kernels' kv_positions).
  int positions(int layer) const { return positions_[static_cast<size_t>(layer)]; }
  size_t bytes() const { return bytes_; }

 private:
  void* base_ = nullptr;
  std::vector<int> positions_;
  std::vector<size_t> offsets_;      ///< per layer: its k, then its v
  std::vector<size_t> layer_bytes_;  ///< per layer: bytes of its k (or v)
  size_t bytes_ = 0;
};

}  // namespace tpshard::cuda
