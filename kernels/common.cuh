// common.cuh: what every kernel file shares: element load/store in fp32 for the three storage
// dtypes, the DType -> C++ type dispatch, warp/block reductions, and the launch-error check.
// Does not own: any operation (one .cu/.cuh pair per operation in this folder).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <string>

#include "format/dtype.h"
#include "format/error.h"

namespace tpshard::cuda {

/// Load one element as fp32.
__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ float to_f32(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }

/// Store an fp32 value as T (round to nearest even).
template <typename T> __device__ __forceinline__ T from_f32(float x);
template <> __device__ __forceinline__ float from_f32<float>(float x) { return x; }
template <> __device__ __forceinline__ __half from_f32<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

/// 4 consecutive elements of T as one aligned load: 8 bytes for f16/bf16, 16 for f32.
template <typename T> struct Pack4 { using Raw = uint2; };
template <> struct Pack4<float> { using Raw = float4; };

/// The 4 elements of one Pack4 load as fp32.
template <typename T>
__device__ __forceinline__ void unpack4(const typename Pack4<T>::Raw& r, float (&f)[4]) {
  const T* e = reinterpret_cast<const T*>(&r);
#pragma unroll
  for (int i = 0; i < 4; ++i) f[i] = to_f32(e[i]);
}

/// Sum over the 32 lanes of a warp (every lane gets the result).
__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

/// Sum over the block (blockDim.x a multiple of 32, at most 1024). `scratch` holds 32 floats.
/// Every thread gets the result. Contains __syncthreads: call from all threads.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  v = warp_sum(v);
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < nwarps ? scratch[lane] : 0.f;
  return warp_sum(v);
}
__device__ __forceinline__ float block_max(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < nwarps ? scratch[lane] : -INFINITY;
  return warp_max(v);
}

/// Raise Kernel's dynamic shared memory limit to `bytes` (launches may need more than 48 KiB) on the
/// current device, once per device: a function attribute holds for one device, and one process may drive
/// several GPUs (bench_generate: a thread per rank). Returns the CUDA status.
template <auto Kernel>
cudaError_t allow_dynamic_smem(int bytes) {
  static std::atomic<uint64_t> devices{0};  // bit d: set on device d (devices 0..63; others every call)
  int dev = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e != cudaSuccess) return e;
  const uint64_t bit = dev < 64 ? uint64_t{1} << dev : 0;
  if (bit && (devices.load() & bit)) return cudaSuccess;
  e = cudaFuncSetAttribute(Kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (e == cudaSuccess) devices.fetch_or(bit);
  return e;
}

/// Throw Error naming the kernel when its launch failed (bad configuration, no device, sticky error).
inline void check_launch(const char* kernel) {
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess)
    throw Error(std::string("kernels: launch of ") + kernel + " failed: " + cudaGetErrorString(e),
                "run with CUDA_LAUNCH_BLOCKING=1 (and compute-sanitizer) to find the faulting kernel");
}

}  // namespace tpshard::cuda

/// TPS_DISPATCH_DTYPE(dtype, T, ...): run the body with T = float / __half / __nv_bfloat16.
#define TPS_DISPATCH_DTYPE(dtype, T, ...)                                   \
  switch (dtype) {                                                          \
    case ::tpshard::DType::F32: { using T = float; __VA_ARGS__; break; }    \
    case ::tpshard::DType::F16: { using T = __half; __VA_ARGS__; break; }   \
    case ::tpshard::DType::BF16: { using T = __nv_bfloat16; __VA_ARGS__; break; } \
  }
