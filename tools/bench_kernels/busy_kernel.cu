// busy_kernel.cu: a stand-in for a latency-bound decode kernel (attention, norm, all_reduce) in the GEMV
// sweep (gemv_sweep.cpp): a few blocks that wait for the previous kernel, let the next one launch at
// once (as those kernels do) and then stay busy for a fixed time, touching no memory.
#include "tools/bench_kernels/busy_kernel.h"

#include "kernels/pdl.cuh"

namespace tpshard::cuda {
namespace {

__global__ void busy_kernel(long long ns) {
  griddep_wait();
  griddep_launch_dependents();
  unsigned long long t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  } while (static_cast<long long>(t - t0) < ns);
}

}  // namespace

cudaError_t launch_busy(int blocks, double us, cudaStream_t stream) {
  return launch_pdl(busy_kernel, dim3(blocks), dim3(128), 0, stream, static_cast<long long>(us * 1e3));
}

}  // namespace tpshard::cuda
