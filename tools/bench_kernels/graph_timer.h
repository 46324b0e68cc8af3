// graph_timer.h: time_graph_us, how bench_kernels times a sequence of launches as a decode step runs
// them: captured in one CUDA graph and replayed.
#pragma once
#include <cuda_runtime.h>

#include "runtime/cuda/check.h"

namespace tpshard::cuda {

/// Microseconds per call of `enqueue(i)` for i = 0..calls-1, captured in one graph and replayed `reps` times.
template <typename F>
double time_graph_us(cudaStream_t s, int calls, int reps, F enqueue) {
  for (int i = 0; i < calls; ++i) enqueue(i);  // eager once: cuBLASLt plans, warm-up
  TPS_CUDA_CHECK(cudaStreamSynchronize(s));
  cudaGraph_t g = nullptr;
  cudaGraphExec_t ge = nullptr;
  TPS_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < calls; ++i) enqueue(i);
  TPS_CUDA_CHECK(cudaStreamEndCapture(s, &g));
  TPS_CUDA_CHECK(cudaGraphInstantiate(&ge, g, 0));
  TPS_CUDA_CHECK(cudaGraphLaunch(ge, s));
  TPS_CUDA_CHECK(cudaStreamSynchronize(s));
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  cudaEventRecord(e0, s);
  for (int r = 0; r < reps; ++r) TPS_CUDA_CHECK(cudaGraphLaunch(ge, s));
  cudaEventRecord(e1, s);
  TPS_CUDA_CHECK(cudaEventSynchronize(e1));
  float ms = 0;
  cudaEventElapsedTime(&ms, e0, e1);
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaGraphExecDestroy(ge);
  cudaGraphDestroy(g);
  return 1e3 * ms / (static_cast<double>(reps) * calls);
}

}  // namespace tpshard::cuda
