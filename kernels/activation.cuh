// activation.cuh: the MLP activation, with its biases: gated (Llama SwiGLU: act(gate) * up, rows of
// ffn_gate_up are gate then up) or plain (GPT-NeoX: act(x + b)). Computed in fp32, rounded once.
#pragma once
#include <cuda_runtime.h>

#include "format/dtype.h"
#include "model/model_config.h"

namespace tpshard::cuda {

struct ActivationParams {
  const void* in = nullptr;    ///< gated: [n, 2*width] (gate | up); plain: [n, width]; of dtype
  const void* bias = nullptr;  ///< optional: [2*width] (gated) or [width], of dtype
  void* out = nullptr;         ///< [n, width] of dtype (may equal `in` when plain)
  DType dtype = DType::F16;
  Activation act = Activation::Silu;
  bool gated = true;
  int n = 0;
  int width = 0;               ///< intermediate_size_per_rank
};

/// gated: out = act(gate + b_gate) * (up + b_up); plain: out = act(in + b).
/// gelu: 0.5x(1 + erf(x/sqrt2)); gelu_tanh: 0.5x(1 + tanh(sqrt(2/pi)(x + 0.044715x^3)));
/// silu: x / (1 + e^-x); relu: max(x, 0)   (torch.nn.functional definitions).
void activation(const ActivationParams& p, cudaStream_t stream);

}  // namespace tpshard::cuda
