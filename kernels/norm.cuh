// norm.cuh: LayerNorm / RMSNorm over the fp32 residual stream, fused with the residual add that
// precedes it (residual += sum of the layer's outputs and biases, then normalize), with up to two
// outputs sharing the statistics (GPT-NeoX parallel residual: ln1 and ln2 of the same input).
// Accumulation is fp32 (GPT-NeoX-20B overflows fp16 sums).
#pragma once
#include <cuda_runtime.h>

#include "format/dtype.h"
#include "model/model_config.h"

namespace tpshard::cuda {

struct AddNormParams {
  float* residual = nullptr;        ///< [n, hidden] f32, updated in place when any add is given
  const void* add0 = nullptr;       ///< [n, hidden] of dtype, optional: residual += add0
  const void* add_bias0 = nullptr;  ///< [hidden] of dtype, optional: residual += add_bias0
  const void* add_bias1 = nullptr;  ///< [hidden] of dtype, optional: residual += add_bias1
  const void* weight0 = nullptr;    ///< [hidden] of dtype, required with out0 (gamma)
  const void* bias0 = nullptr;      ///< [hidden] of dtype, LayerNorm beta (optional)
  void* out0 = nullptr;             ///< [n, hidden] of dtype; nullptr (and no out1): only the adds, no norm
  const void* weight1 = nullptr;    ///< second norm's gamma, optional (then bias1/out1 like above)
  const void* bias1 = nullptr;
  void* out1 = nullptr;
  DType dtype = DType::F16;
  NormKind kind = NormKind::RmsNorm;
  float eps = 1e-5f;
  int n = 0;
  int hidden = 0;
};

/// residual += add0 + add_bias0 + add_bias1 (those given); then per row
///   LayerNorm: out = (x - mean) / sqrt(var + eps) * weight + bias   (biased variance, as torch)
///   RMSNorm:   out = x / sqrt(mean(x^2) + eps) * weight               (HF LlamaRMSNorm)
/// computed in fp32 and rounded once to dtype. One block per row.
void add_norm(const AddNormParams& p, cudaStream_t stream);

}  // namespace tpshard::cuda
