// busy_kernel.h: launch_busy, a latency-bound stand-in kernel for bench_kernels' GEMV sweep.
#pragma once
#include <cuda_runtime.h>

namespace tpshard::cuda {

/// Enqueue (launch_pdl) `blocks` blocks of 128 threads that griddep_wait(), release the next kernel at
/// once, then spin for `us` microseconds (%globaltimer) without touching memory: the place of an
/// attention / norm kernel between two GEMVs, so that the GEMV's prefetch before its griddep_wait() is
/// measured as in a decode step. Returns the launch status.
cudaError_t launch_busy(int blocks, double us, cudaStream_t stream);

}  // namespace tpshard::cuda
