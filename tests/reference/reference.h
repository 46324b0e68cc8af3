// reference.h: CPU reference implementations of every CUDA kernel in kernels/, in double precision,
// written for clarity rather than speed. Each is the documentation of what its kernel computes; the
// kernel tests (tests/kernels/) compare against them. Shapes use the kernels' letters: n tokens,
// H hidden, hd head_dim. All matrices are row-major std::vector<double>.
#pragma once
#include <cstdint>
#include <vector>

#include "model/model_config.h"

namespace tpshard::ref {

using Vec = std::vector<double>;

/// out [n, H]: row tokens[t] - vocab_begin of table [vocab_per_rank, H], or zeros when not on this rank.
Vec embedding(const std::vector<int32_t>& tokens, const Vec& table, int hidden, int64_t vocab_begin, int64_t vocab_per_rank);

/// residual [n, H] += add0 [n, H] (empty: none) + bias0 [H] + bias1 [H]; returns the norm of each row
/// with weight/bias ([H]; bias empty for RMSNorm). LayerNorm: biased variance. RMSNorm: x / sqrt(mean x^2 + eps) * w.
Vec add_norm(Vec& residual, const Vec& add0, const Vec& bias0, const Vec& bias1, const Vec& weight, const Vec& bias,
             NormKind kind, double eps, int n, int hidden);

/// In place on qkv [n, row_stride]: heads 0..num_heads+num_kv_heads-1 rotated, HF rotate_half convention.
void rotary(Vec& qkv, int64_t row_stride, const std::vector<int32_t>& positions, const std::vector<double>& inv_freq,
            int num_heads, int num_kv_heads, int head_dim, int rotary_ndims);

/// Default-rope inverse frequencies 1 / theta^(2i/rotary_ndims), i < rotary_ndims/2.
std::vector<double> inv_freq_default(double theta, int rotary_ndims);

/// Causal attention of query tokens over keys k/v [positions, kv_heads, hd] of their own sequence
/// (seq_k[t] / seq_v[t]: that token's sequence), keys 0..positions[t] (window > 0: only the last `window`
/// of them). out [n, heads*hd]. Q head h reads KV head (h + head_offset) / kv_group (kv_group 0: heads /
/// kv_heads), as on a rank of an uneven split. softcap > 0: each scaled score s becomes
/// softcap * tanh(s / softcap) (Gemma 2's attn_logit_softcapping).
Vec attention(const Vec& q, int64_t q_stride, const std::vector<const Vec*>& seq_k, const std::vector<const Vec*>& seq_v,
              const std::vector<int32_t>& positions, int num_heads, int num_kv_heads, int head_dim, double scale,
              int kv_group = 0, int head_offset = 0, double softcap = 0, int window = 0);

/// RMSNorm of each row of x [n, H]: x / sqrt(mean x^2 + eps) * (offset + w) (offset 1: Gemma2RMSNorm).
Vec rms_norm(const Vec& x, const Vec& w, double offset, double eps, int n, int hidden);

/// The soft-cap of each value: cap * tanh(x / cap) (kernels/softcap.cuh).
Vec softcap(const Vec& x, double cap);

/// gated: in [n, 2w] (gate | up) -> act(gate + b) * (up + b); plain: act(in + b). out [n, w].
Vec activation(const Vec& in, const Vec& bias, Activation act, bool gated, int n, int width);
double activation_scalar(double x, Activation act);

/// y [n, out] = x [n, in] * w[out, in]^T + beta * y0 (y0 empty: 0).
Vec linear(const Vec& x, const Vec& w, const Vec& y0, double beta, int n, int out, int in);

/// The mixture-of-experts MLP of one rank (kernels/moe_block.cuh, modeling_mixtral.py
/// MixtralSparseMoeBlock): per token p = softmax(x router_w^T) over `experts`, the top_k largest (lower
/// id first on ties) renormalized to sum 1; out [n, H] = sum over the routed experts, in increasing id, of
/// weight * down_e(act(gate_e x) * up_e x). router_w [experts, H]; gate_up_w [experts 2 inter, H] (per
/// expert gate rows, then up rows); down_w [experts H, inter]. ids (when non-null) gets the routed
/// expert ids [n, top_k] in decreasing p.
Vec moe_block(const Vec& x, const Vec& router_w, const Vec& gate_up_w, const Vec& down_w, Activation act, int n,
              int hidden, int inter, int experts, int top_k, std::vector<int32_t>* ids = nullptr);

/// Argmax over the first min(vocab_per_rank, vocab_size - vocab_begin) columns of logits [n, vocab_per_rank];
/// lowest id on ties; returns global ids (-1 when the rank has no valid column).
std::vector<int32_t> argmax(const Vec& logits, int n, int64_t vocab_per_rank, int64_t vocab_begin, int64_t vocab_size);

}  // namespace tpshard::ref
