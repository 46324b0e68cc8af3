// norm.cu: fused residual add + LayerNorm/RMSNorm (see norm.cuh).
#include "kernels/common.cuh"
#include "kernels/norm.cuh"
#include "kernels/pdl.cuh"

namespace tpshard::cuda {
namespace {

template <typename T>
__device__ __forceinline__ float opt(const void* p, int64_t i) {
  return p ? to_f32(static_cast<const T*>(p)[i]) : 0.f;
}

template <typename T, bool kLayerNorm>
__global__ void add_norm_kernel(AddNormParams p) {
  __shared__ float scratch[32];
  griddep_wait();  // the residual and the adds come from the previous kernels
  griddep_launch_dependents();
  const int64_t row = blockIdx.x;
  float* x = p.residual + row * p.hidden;
  const T* add0 = static_cast<const T*>(p.add0);
  const bool any_add = p.add0 || p.add_bias0 || p.add_bias1;
  // Gemma 2 post-norm of the layer output: its own RMS statistics first (block-uniform branch)
  const T* add_w = add0 ? static_cast<const T*>(p.add0_weight) : nullptr;
  float add_rstd = 0.f;
  if (add_w) {
    float sa = 0.f;
    for (int i = threadIdx.x; i < p.hidden; i += blockDim.x) {
      const float a = to_f32(add0[row * p.hidden + i]) + opt<T>(p.add_bias0, i);
      sa += a * a;
    }
    add_rstd = rsqrtf(block_sum(sa, scratch) / p.hidden + p.eps);
  }
  float s = 0.f;
  for (int i = threadIdx.x; i < p.hidden; i += blockDim.x) {
    float v = x[i];
    if (any_add) {
      if (add_w) {  // the layer output with its bias, normalized, rounded to dtype, then added
        const float a = to_f32(add0[row * p.hidden + i]) + opt<T>(p.add_bias0, i);
        v += to_f32(from_f32<T>(a * add_rstd * (p.weight_offset + to_f32(add_w[i]))));
        v += opt<T>(p.add_bias1, i);
      } else {
        if (add0) v += to_f32(add0[row * p.hidden + i]);
        v += opt<T>(p.add_bias0, i) + opt<T>(p.add_bias1, i);
      }
      x[i] = v;
    }
    s += v;
  }
  if (!p.out0) return;  // the adds only (block-uniform: every thread returns)
  if (!p.normalize0) {  // OLMo 2: the block reads the residual stream itself, rounded to dtype
    T* out0 = static_cast<T*>(p.out0) + row * p.hidden;
    for (int i = threadIdx.x; i < p.hidden; i += blockDim.x) out0[i] = from_f32<T>(x[i]);
    return;
  }
  const float mean = kLayerNorm ? block_sum(s, scratch) / p.hidden : 0.f;
  float ss = 0.f;
  for (int i = threadIdx.x; i < p.hidden; i += blockDim.x) {
    const float d = x[i] - mean;
    ss += d * d;
  }
  const float rstd = rsqrtf(block_sum(ss, scratch) / p.hidden + p.eps);
  T* out0 = static_cast<T*>(p.out0) + row * p.hidden;
  T* out1 = p.out1 ? static_cast<T*>(p.out1) + row * p.hidden : nullptr;
  for (int i = threadIdx.x; i < p.hidden; i += blockDim.x) {
    const float y = (x[i] - mean) * rstd;
    out0[i] = from_f32<T>(y * (p.weight_offset + opt<T>(p.weight0, i)) + opt<T>(p.bias0, i));
    if (out1) out1[i] = from_f32<T>(y * (p.weight_offset + opt<T>(p.weight1, i)) + opt<T>(p.bias1, i));
  }
}

}  // namespace

void add_norm(const AddNormParams& p, cudaStream_t stream) {
  if (p.n == 0) return;
  TPS_CHECK(((p.weight0 || !p.normalize0) && p.out0) || (!p.out0 && !p.out1), "kernels/add_norm: weight0 and out0 are required",
            "pass the norm weight, or no output at all for the adds only");
  TPS_CHECK(!p.add0_weight || (p.add0 && p.kind == NormKind::RmsNorm), "kernels/add_norm: add0_weight needs add0 and RMSNorm",
            "this is a bug in the caller");
  TPS_CHECK(p.weight_offset == 0.f || p.kind == NormKind::RmsNorm, "kernels/add_norm: weight_offset is for RMSNorm only",
            "this is a bug in the caller");
  const int threads = p.hidden >= 1024 ? 1024 : (p.hidden >= 512 ? 512 : 256);
  if (p.kind == NormKind::LayerNorm) {
    TPS_DISPATCH_DTYPE(p.dtype, T, launch_pdl(add_norm_kernel<T, true>, dim3(p.n), dim3(threads), 0, stream, p));
  } else {
    TPS_DISPATCH_DTYPE(p.dtype, T, launch_pdl(add_norm_kernel<T, false>, dim3(p.n), dim3(threads), 0, stream, p));
  }
  check_launch("add_norm_kernel");
}

}  // namespace tpshard::cuda
