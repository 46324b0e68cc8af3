// softcap.cu: tanh soft-capping in place (see softcap.cuh). A grid-stride loop over the elements.
#include <algorithm>
#include <string>

#include "kernels/common.cuh"
#include "kernels/pdl.cuh"
#include "kernels/softcap.cuh"

namespace tpshard::cuda {
namespace {

__global__ void softcap_kernel(float* x, int64_t n, float cap) {
  griddep_wait();  // x comes from the previous kernel (the LM head)
  griddep_launch_dependents();
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    x[i] = tanhf(x[i] / cap) * cap;
}

}  // namespace

void softcap_f32(float* x, int64_t n, float cap, cudaStream_t stream) {
  TPS_CHECK(cap > 0.f && cap < INFINITY, "kernels/softcap: cap " + std::to_string(cap) + " is not a positive number",
            "this is a bug in the caller (0 means no soft-cap: do not call)");
  if (n == 0) return;
  const int blocks = static_cast<int>(std::min<int64_t>((n + 255) / 256, 4096));
  launch_pdl(softcap_kernel, dim3(blocks), dim3(256), 0, stream, x, n, cap);
  check_launch("softcap_kernel");
}

}  // namespace tpshard::cuda
