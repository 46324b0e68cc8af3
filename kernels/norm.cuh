// norm.cuh: LayerNorm / RMSNorm over the fp32 residual stream, fused with the residual add that
// precedes it (residual += sum of the layer's outputs and biases, then normalize), with up to two
// outputs sharing the statistics (GPT-NeoX parallel residual: ln1 and ln2 of the same input), and the
// RMSNorm of the added layer output itself before the add (Gemma 2's post-attention / post-feedforward
// norms). Accumulation is fp32 (GPT-NeoX-20B overflows fp16 sums).
#pragma once
#include <cuda_runtime.h>

#include "format/dtype.h"
#include "model/model_config.h"

namespace tpshard::cuda {

struct AddNormParams {
  float* residual = nullptr;        ///< [n, hidden] f32, updated in place when any add is given
  const void* add0 = nullptr;       ///< [n, hidden] of dtype, optional: residual += add0
  /// [hidden] of dtype, optional (with add0, RMSNorm): the layer output a = add0 + add_bias0 is
  /// RMS-normalized with this weight before the add, residual += dtype(a / sqrt(mean(a^2) + eps) *
  /// (weight_offset + add0_weight)) (Gemma 2's post_attention_layernorm / post_feedforward_layernorm;
  /// rounded to dtype as Gemma2RMSNorm's type_as), then add_bias1.
  const void* add0_weight = nullptr;
  const void* add_bias0 = nullptr;  ///< [hidden] of dtype, optional: residual += add_bias0
  const void* add_bias1 = nullptr;  ///< [hidden] of dtype, optional: residual += add_bias1
  const void* weight0 = nullptr;    ///< [hidden] of dtype, required with out0 (gamma)
  const void* bias0 = nullptr;      ///< [hidden] of dtype, LayerNorm beta (optional)
  void* out0 = nullptr;             ///< [n, hidden] of dtype; nullptr (and no out1): only the adds, no norm
  /// false: out0 = dtype(residual) after the adds, not normalized (weight0 / out1 unused): the input of a
  /// block without a pre-norm (ModelConfig::pre_norms false, OLMo 2).
  bool normalize0 = true;
  const void* weight1 = nullptr;    ///< second norm's gamma, optional (then bias1/out1 like above)
  const void* bias1 = nullptr;
  void* out1 = nullptr;
  DType dtype = DType::F16;
  NormKind kind = NormKind::RmsNorm;
  float eps = 1e-5f;           ///< of every norm here (the add0 norm too)
  /// Added to every RMSNorm weight (weight0, weight1, add0_weight): 1 for Gemma's x * (1 + w)
  /// (modeling_gemma2.py Gemma2RMSNorm), 0 otherwise.
  float weight_offset = 0.f;
  int n = 0;
  int hidden = 0;
};

/// residual += add0 + add_bias0 (that sum RMS-normalized first when add0_weight is given) + add_bias1;
/// then per row
///   LayerNorm: out = (x - mean) / sqrt(var + eps) * weight + bias   (biased variance, as torch)
///   RMSNorm:   out = x / sqrt(mean(x^2) + eps) * (weight_offset + weight)   (HF LlamaRMSNorm; Gemma2RMSNorm
///              with weight_offset 1)
/// computed in fp32 and rounded once to dtype. One block per row.
void add_norm(const AddNormParams& p, cudaStream_t stream);

}  // namespace tpshard::cuda
