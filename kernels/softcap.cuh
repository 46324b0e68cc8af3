// softcap.cuh: tanh soft-capping of f32 values in place (Gemma 2's final_logit_softcapping on the
// logits, before the argmax and sampling: Gemma2ForCausalLM.forward).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace tpshard::cuda {

/// x[i] <- tanh(x[i] / cap) * cap for i < n (transformers' order: divide, tanh, multiply), fp32. cap > 0;
/// Throws Error otherwise. Launched with programmatic dependent launch (kernels/pdl.cuh).
void softcap_f32(float* x, int64_t n, float cap, cudaStream_t stream);

}  // namespace tpshard::cuda
