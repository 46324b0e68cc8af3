// activation_fn.cuh: the scalar MLP activation functions in fp32, as a device function shared by the
// activation kernel (kernels/activation.cu) and the decode GEMV epilogue (kernels/gemv.cu).
// Does not own: any kernel.
#pragma once
#include <cuda_runtime.h>

#include "model/model_config.h"

namespace tpshard::cuda {

/// act(x) in fp32 (torch.nn.functional definitions): gelu 0.5x(1 + erf(x/sqrt2)); gelu_tanh
/// 0.5x(1 + tanh(sqrt(2/pi)(x + 0.044715x^3))); silu x / (1 + e^-x); relu max(x, 0).
__device__ __forceinline__ float apply_act(float x, Activation a) {
  switch (a) {
    case Activation::Gelu: return 0.5f * x * (1.f + erff(x * 0.70710678118654752f));
    case Activation::GeluTanh: return 0.5f * x * (1.f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)));
    case Activation::Silu: return x / (1.f + expf(-x));
    case Activation::Relu: return fmaxf(x, 0.f);
  }
  return x;
}

}  // namespace tpshard::cuda
