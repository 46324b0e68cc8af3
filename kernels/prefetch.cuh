// prefetch.cuh: L2 prefetch of the NEXT kernel's weights from inside a latency-bound kernel (decode-step
// norms, attention, all_reduce), so that HBM, idle during those kernels, already streams the first
// megabytes of the following GEMV. Uses the sm_90 bulk prefetch (PTX cp.async.bulk.prefetch.L2.global:
// fire and forget, no registers or shared memory held; a hint the hardware may drop). Weights are
// constant, so the prefetch is issued before griddep_wait() and may overlap the previous kernel too.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace tpshard::cuda {

/// Up to two byte ranges to pull into L2 (either may be empty). Addresses must be 16-byte aligned; sizes
/// are rounded down to a multiple of 16.
struct L2Prefetch {
  const void* ptr[2] = {nullptr, nullptr};
  uint64_t bytes[2] = {0, 0};
};

/// Issue the prefetch of p, split into kL2PrefetchChunk-byte pieces spread over every thread of the grid
/// (one instruction per piece). Call from every thread (no synchronization inside); a no-op below sm_90.
constexpr uint32_t kL2PrefetchChunk = 32u << 10;
__device__ __forceinline__ void issue_l2_prefetch(const L2Prefetch& p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const uint64_t tid = static_cast<uint64_t>(blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z)) *
                           (blockDim.x * blockDim.y * blockDim.z) + threadIdx.x;
  const uint64_t nthreads = static_cast<uint64_t>(gridDim.x) * gridDim.y * gridDim.z * blockDim.x * blockDim.y * blockDim.z;
  uint64_t first = 0;  // piece index where range r starts, over both ranges
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const uint64_t bytes = p.bytes[r] & ~uint64_t(15);
    if (p.ptr[r] == nullptr || bytes == 0) continue;
    const uint64_t pieces = (bytes + kL2PrefetchChunk - 1) / kL2PrefetchChunk;
    // this thread's pieces of range r: global piece ids first + k with (first + k) % nthreads == tid
    uint64_t k = (tid + nthreads - first % nthreads) % nthreads;
    for (; k < pieces; k += nthreads) {
      const uint64_t off = k * kL2PrefetchChunk;
      const uint32_t size = static_cast<uint32_t>(bytes - off < kL2PrefetchChunk ? bytes - off : kL2PrefetchChunk);
      const char* addr = static_cast<const char*>(p.ptr[r]) + off;
      asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(addr), "r"(size) : "memory");
    }
    first += pieces;
  }
#else
  (void)p;
#endif
}

}  // namespace tpshard::cuda
