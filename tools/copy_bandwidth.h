// copy_bandwidth.h: the HBM ceiling the benchmarks report against: device-to-device cudaMemcpy
// bandwidth of the current device (shared by tools/bench_generate and tools/bench_kernels).
#pragma once
#include <cuda_runtime.h>

#include <cstddef>

namespace tpshard {

/// Read + write bytes per second (GB/s) of 10 device-to-device copies of `bytes` (after one warm-up
/// copy) on the current device; 0 when the two buffers cannot be allocated. Holds 2 x bytes of device
/// memory while it runs.
inline double device_copy_gbps(size_t bytes = size_t(1) << 30) {
  void *a = nullptr, *b = nullptr;
  if (cudaMalloc(&a, bytes) != cudaSuccess || cudaMalloc(&b, bytes) != cudaSuccess) {
    cudaFree(a);
    (void)cudaGetLastError();
    return 0;
  }
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice);
  cudaEventRecord(e0);
  for (int i = 0; i < 10; ++i) cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice);
  cudaEventRecord(e1);
  cudaEventSynchronize(e1);
  float ms = 0;
  cudaEventElapsedTime(&ms, e0, e1);
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaFree(a);
  cudaFree(b);
  return ms > 0 ? 2.0 * static_cast<double>(bytes) * 10 / (ms / 1e3) / 1e9 : 0;
}

}  // namespace tpshard
