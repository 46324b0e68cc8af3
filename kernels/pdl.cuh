// pdl.cuh: programmatic dependent launch (PDL, sm_90+; CUDA programming guide, "Programmatic Dependent
// Launch and Synchronization"). A kernel launched with launch_pdl() may start while the previous kernel
// on the stream is still finishing; it must call griddep_wait() before it reads anything that kernel
// wrote (or writes anything it reads). Work that depends only on constant data (weights) may run
// before the wait: that is how the decode-path GEMV streams its first weight tiles while the previous
// kernel drains. Without PDL (older GPUs, plain <<<>>> launches) griddep_wait() returns at once.
#pragma once
#include <cuda_runtime.h>

#include <atomic>
#include <utility>

namespace tpshard::cuda {

/// Wait until every kernel this one depends on (programmatically) has completed and its memory is
/// visible. A no-op when the kernel was not launched with the PDL attribute, and below sm_90.
__device__ __forceinline__ void griddep_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

/// Allow the next PDL-launched kernel on the stream to start being scheduled (once every block of this
/// kernel has called it or exited). It still waits in its griddep_wait() for this kernel to finish.
__device__ __forceinline__ void griddep_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

/// Whether launch_pdl sets the PDL attribute (default on). The runtime sets it from its tuning
/// (TPSHARD_NO_PDL=1 turns it off, runtime/tuning.h) before it launches kernels; off, every launch_pdl
/// is an ordinary launch (A/B timing, debugging).
inline std::atomic<bool>& pdl_setting() {
  static std::atomic<bool> on{true};
  return on;
}
inline bool pdl_enabled() { return pdl_setting().load(std::memory_order_relaxed); }
inline void set_pdl_enabled(bool on) { pdl_setting().store(on, std::memory_order_relaxed); }

/// Launch kernel<<<grid, block, smem, stream>>>(args...) with the programmatic-stream-serialization
/// attribute when pdl_enabled(). Capturable in CUDA graphs (the edge becomes a programmatic one).
/// Returns the launch status (callers pass it to check_launch via cudaGetLastError semantics).
template <typename... KArgs, typename... Args>
cudaError_t launch_pdl(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                       Args&&... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = pdl_enabled() ? 1 : 0;
  return cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
}

}  // namespace tpshard::cuda
