// kv_cache.cpp: one allocation for all layers' K and V (see kv_cache.h).
#include "runtime/cuda/layers/kv_cache.h"

#include <cuda_runtime.h>

#include <string>

#include "format/error.h"
#include "runtime/cuda/check.h"

namespace tpshard::cuda {

KvCache::KvCache(int layers, int slots, int kv_heads, int max_seq_len, int head_dim, DType dtype) {
  layer_bytes_ = static_cast<size_t>(slots) * kv_heads * max_seq_len * head_dim * dtype_size(dtype);
  bytes_ = 2 * static_cast<size_t>(layers) * layer_bytes_;
  size_t free_b = 0, total_b = 0;
  TPS_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  if (bytes_ > free_b)
    throw Error("cuda kv_cache: needs " + std::to_string(bytes_) + " bytes (" + std::to_string(layers) + " layers x " +
                    std::to_string(slots) + " slots x " + std::to_string(max_seq_len) + " positions) but only " +
                    std::to_string(free_b) + " bytes are free on the device",
                "lower --max-batch or --max-seq-len, or use a larger --tp");
  TPS_CUDA_CHECK(cudaMalloc(&base_, bytes_));
  TPS_CUDA_CHECK(cudaMemset(base_, 0, bytes_));
}

KvCache::~KvCache() { cudaFree(base_); }

}  // namespace tpshard::cuda
