// embedding.cu: vocab-parallel embedding lookup (see embedding.cuh).
#include "kernels/common.cuh"
#include "kernels/embedding.cuh"
#include "kernels/pdl.cuh"

namespace tpshard::cuda {
namespace {

template <typename T>
__global__ void embedding_kernel(EmbeddingParams p) {
  const int t = blockIdx.x;
  griddep_wait();
  griddep_launch_dependents();
  const int64_t row = static_cast<int64_t>(p.tokens[t]) - p.vocab_begin;
  const bool here = row >= 0 && row < p.vocab_per_rank;
  const T* src = static_cast<const T*>(p.table) + (here ? row : 0) * p.hidden;
  float* dst = p.out + static_cast<int64_t>(t) * p.hidden;
  const T* pos = p.pos_table ? static_cast<const T*>(p.pos_table) + static_cast<int64_t>(p.positions[t]) * p.hidden : nullptr;
  const bool scaled = p.scale != 1.f;
  const float scale = to_f32(from_f32<T>(p.scale));  // the normalizer in the activation dtype
  for (int i = threadIdx.x; i < p.hidden; i += blockDim.x) {
    float e = here ? to_f32(src[i]) : 0.f;
    if (scaled) e = to_f32(from_f32<T>(e * scale));
    dst[i] = pos ? e + to_f32(pos[i]) : e;
  }
}

}  // namespace

void embedding_lookup(const EmbeddingParams& p, cudaStream_t stream) {
  if (p.n == 0) return;
  TPS_DISPATCH_DTYPE(p.dtype, T, launch_pdl(embedding_kernel<T>, dim3(p.n), dim3(256), 0, stream, p));
  check_launch("embedding_kernel");
}

}  // namespace tpshard::cuda
