// kv_cache.cpp: one allocation for all layers' K and V (see kv_cache.h).
#include "runtime/cuda/layers/kv_cache.h"

#include <cuda_runtime.h>

#include <string>

#include "format/error.h"
#include "runtime/cuda/check.h"

namespace tpshard::cuda {

KvCache::KvCache(const std::vector<int>& layer_positions, int slots, int kv_heads, int head_dim, DType dtype)
    : positions_(layer_positions) {
  size_t rows = 0;
  for (int n : positions_) {
    offsets_.push_back(bytes_);
    layer_bytes_.push_back(static_cast<size_t>(slots) * kv_heads * n * head_dim * dtype_size(dtype));
    bytes_ += 2 * layer_bytes_.back();
    rows += static_cast<size_t>(n);
  }
  const size_t layers = positions_.size();
  size_t free_b = 0, total_b = 0;
  TPS_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  if (bytes_ > free_b)
    throw Error("cuda kv_cache: needs " + std::to_string(bytes_) + " bytes (" + std::to_string(layers) + " layers x " +
                    std::to_string(slots) + " slots, " + std::to_string(rows) + " positions per slot over the layers) but only " +
                    std::to_string(free_b) + " bytes are free on the device",
                "lower --max-batch or --max-seq-len, or use a larger --tp");
  TPS_CUDA_CHECK(cudaMalloc(&base_, bytes_));
  TPS_CUDA_CHECK(cudaMemset(base_, 0, bytes_));
}

KvCache::~KvCache() { cudaFree(base_); }

}  // namespace tpshard::cuda
