// ops.h: the fp32 operations of the CPU reference transformer. Row-major everywhere; weights are
// [out, in] as stored in shard files (model/tensor_names.h), so y = x W^T reads contiguous rows.
// Owns: the maths only (no weights, no kv_cache, no communication).
#pragma once
#include <cstdint>

#include "model/model_config.h"
#include "runtime/cpu/thread_pool.h"

namespace tpshard::cpu {

/// y[t, o] = sum_i x[t, i] * w[o, i] (+ bias[o]).  x [n_tokens, in], w [out, in], bias [out] or null,
/// y [n_tokens, out]. f32 accumulation. Parallel over output features (deterministic).
void linear(ThreadPool& pool, const float* x, const float* w, const float* bias, float* y, int64_t n_tokens,
            int64_t in, int64_t out);

/// LayerNorm over the last dim (torch.nn.LayerNorm): y = (x - mean) / sqrt(var + eps) * w + b, biased
/// variance. x, y [n_tokens, n]; w, b [n] (b may be null). Statistics accumulate in f64.
void layer_norm(const float* x, const float* w, const float* b, float* y, int64_t n_tokens, int64_t n, double eps);

/// RMSNorm (transformers LlamaRMSNorm): y = (offset + w) * x / sqrt(mean(x^2) + eps). Shapes as layer_norm;
/// x == y is allowed. offset 1 is Gemma's x * (1 + weight) (modeling_gemma2.py Gemma2RMSNorm), 0 Llama's.
void rms_norm(const float* x, const float* w, float* y, int64_t n_tokens, int64_t n, double eps, float offset = 0.0f);

/// Soft-cap in place: x <- cap * tanh(x / cap) (Gemma 2's attention-score and final-logit capping,
/// modeling_gemma2.py: divide, tanh, multiply, in that order). cap > 0.
void softcap(float* x, int64_t n, float cap);

/// In place: gelu (erf), gelu tanh approximation (gelu_new / gelu_fast / gelu_pytorch_tanh), silu, relu.
void activation(Activation act, float* x, int64_t n);
float activation_value(Activation act, float x);

/// Gated MLP input: gate_up [n_tokens, 2 * inter] (each row: gate | up) -> out [n_tokens, inter] =
/// act(gate) * up (Llama: SiLU).
void gated_activation(Activation act, const float* gate_up, float* out, int64_t n_tokens, int64_t inter);

/// A contiguous run of cached positions: k, v [n, head_dim] (row stride head_dim).
struct KvSpan {
  const float* k = nullptr;
  const float* v = nullptr;
  int64_t n = 0;
};

/// Causal attention of one query head over the cached positions of spans, concatenated (e.g. a shared
/// prefix's positions, then the sequence's own): out[d] = sum_j softmax(s)_j v[j, d], s_j = scale *
/// dot(q, k[j]), soft-capped to cap * tanh(s_j / cap) when cap > 0 (Gemma 2's attn_logit_softcapping).
/// q, out [head_dim]; scores: scratch of sum(n) floats. Softmax in f32 with max subtraction; the
/// arithmetic does not depend on how the positions are split into spans.
void attention_head(const float* q, const KvSpan* spans, int n_spans, int64_t head_dim, float scale, float* out,
                    float* scores, float cap = 0.0f);

}  // namespace tpshard::cpu
