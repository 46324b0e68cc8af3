// byte_planes.cu: interleave_byte_planes (see byte_planes.cuh). One thread writes one 2-byte element;
// a grid-stride loop covers any n.
#include "runtime/cuda/byte_planes.cuh"
#include "runtime/cuda/check.h"

namespace tpshard::cuda {
namespace {

__global__ void interleave_byte_planes_kernel(const uint8_t* __restrict__ planes, uint16_t* __restrict__ dst, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    dst[i] = uint16_t(planes[i]) | uint16_t(uint16_t(planes[n + i]) << 8);  // little-endian element
  }
}

}  // namespace

void interleave_byte_planes(const uint8_t* planes, uint8_t* dst, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  const int threads = 256;
  size_t blocks = (n + threads - 1) / threads;
  if (blocks > 65535u * 8u) blocks = 65535u * 8u;
  interleave_byte_planes_kernel<<<unsigned(blocks), threads, 0, stream>>>(planes, reinterpret_cast<uint16_t*>(dst), n);
  TPS_CUDA_LAUNCH_CHECK("interleave_byte_planes_kernel");
}

}  // namespace tpshard::cuda
