// ops.cpp: straightforward fp32 implementations of the CPU backend's operations. The dot product uses
// 8 independent partial sums so the compiler can vectorise it without -ffast-math.
#include "runtime/cpu/ops.h"

#include <algorithm>
#include <cmath>

namespace tpshard::cpu {

namespace {

inline float dot(const float* a, const float* b, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int l = 0; l < 8; ++l) acc[l] += a[i + l] * b[i + l];
  float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

/// Four dot products against one weight row at once (one pass over w for 4 tokens).
inline void dot4(const float* x0, const float* x1, const float* x2, const float* x3, const float* w, int64_t n,
                 float* out) {
  float a0[8] = {0}, a1[8] = {0}, a2[8] = {0}, a3[8] = {0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int l = 0; l < 8; ++l) {
      const float wv = w[i + l];
      a0[l] += x0[i + l] * wv;
      a1[l] += x1[i + l] * wv;
      a2[l] += x2[i + l] * wv;
      a3[l] += x3[i + l] * wv;
    }
  }
  float* accs[4] = {a0, a1, a2, a3};
  const float* xs[4] = {x0, x1, x2, x3};
  for (int r = 0; r < 4; ++r) {
    const float* a = accs[r];
    float s = ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
    for (int64_t j = i; j < n; ++j) s += xs[r][j] * w[j];
    out[r] = s;
  }
}

}  // namespace

void linear(ThreadPool& pool, const float* x, const float* w, const float* bias, float* y, int64_t n_tokens,
            int64_t in, int64_t out) {
  pool.parallel_for(out, [&](int64_t o_begin, int64_t o_end) {
    // Tokens in blocks of 4 share each weight row; weight rows in blocks that stay in cache.
    constexpr int64_t kRowBlock = 64;
    for (int64_t ob = o_begin; ob < o_end; ob += kRowBlock) {
      const int64_t oe = std::min(o_end, ob + kRowBlock);
      int64_t t = 0;
      for (; t + 4 <= n_tokens; t += 4) {
        const float* x0 = x + t * in;
        for (int64_t o = ob; o < oe; ++o) {
          float r[4];
          dot4(x0, x0 + in, x0 + 2 * in, x0 + 3 * in, w + o * in, in, r);
          const float b = bias ? bias[o] : 0.0f;
          for (int k = 0; k < 4; ++k) y[(t + k) * out + o] = r[k] + b;
        }
      }
      for (; t < n_tokens; ++t)
        for (int64_t o = ob; o < oe; ++o) y[t * out + o] = dot(x + t * in, w + o * in, in) + (bias ? bias[o] : 0.0f);
    }
  });
}

void layer_norm(const float* x, const float* w, const float* b, float* y, int64_t n_tokens, int64_t n, double eps) {
  for (int64_t t = 0; t < n_tokens; ++t) {
    const float* xr = x + t * n;
    double mean = 0;
    for (int64_t i = 0; i < n; ++i) mean += xr[i];
    mean /= static_cast<double>(n);
    double var = 0;
    for (int64_t i = 0; i < n; ++i) var += (xr[i] - mean) * (xr[i] - mean);
    var /= static_cast<double>(n);
    const double inv = 1.0 / std::sqrt(var + eps);
    float* yr = y + t * n;
    for (int64_t i = 0; i < n; ++i)
      yr[i] = static_cast<float>((xr[i] - mean) * inv) * w[i] + (b ? b[i] : 0.0f);
  }
}

void rms_norm(const float* x, const float* w, float* y, int64_t n_tokens, int64_t n, double eps, float offset) {
  for (int64_t t = 0; t < n_tokens; ++t) {
    const float* xr = x + t * n;
    double ss = 0;
    for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(xr[i]) * xr[i];
    const double inv = 1.0 / std::sqrt(ss / static_cast<double>(n) + eps);
    float* yr = y + t * n;
    for (int64_t i = 0; i < n; ++i) yr[i] = (offset + w[i]) * static_cast<float>(xr[i] * inv);
  }
}

void softcap(float* x, int64_t n, float cap) {
  for (int64_t i = 0; i < n; ++i) x[i] = std::tanh(x[i] / cap) * cap;
}

float activation_value(Activation act, float x) {
  switch (act) {
    case Activation::Gelu: return 0.5f * x * (1.0f + std::erf(x * static_cast<float>(M_SQRT1_2)));
    case Activation::GeluTanh: {
      const float k = 0.7978845608028654f;  // sqrt(2 / pi)
      return 0.5f * x * (1.0f + std::tanh(k * (x + 0.044715f * x * x * x)));
    }
    case Activation::Silu: return x / (1.0f + std::exp(-x));
    case Activation::Relu: return x > 0.0f ? x : 0.0f;
  }
  return x;
}

void activation(Activation act, float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = activation_value(act, x[i]);
}

void gated_activation(Activation act, const float* gate_up, float* out, int64_t n_tokens, int64_t inter) {
  for (int64_t t = 0; t < n_tokens; ++t) {
    const float* gate = gate_up + t * 2 * inter;
    const float* up = gate + inter;
    for (int64_t i = 0; i < inter; ++i) out[t * inter + i] = activation_value(act, gate[i]) * up[i];
  }
}

void attention_head(const float* q, const KvSpan* spans, int n_spans, int64_t head_dim, float scale, float* out,
                    float* scores, float cap) {
  float max_s = -INFINITY;
  int64_t n_ctx = 0;
  for (int s = 0; s < n_spans; ++s)
    for (int64_t j = 0; j < spans[s].n; ++j, ++n_ctx) {
      float v = dot(q, spans[s].k + j * head_dim, head_dim) * scale;
      if (cap > 0.0f) v = std::tanh(v / cap) * cap;
      scores[n_ctx] = v;
      max_s = std::max(max_s, v);
    }
  float sum = 0.0f;
  for (int64_t j = 0; j < n_ctx; ++j) {
    scores[j] = std::exp(scores[j] - max_s);
    sum += scores[j];
  }
  const float inv = 1.0f / sum;
  std::fill(out, out + head_dim, 0.0f);
  int64_t i = 0;
  for (int s = 0; s < n_spans; ++s)
    for (int64_t j = 0; j < spans[s].n; ++j, ++i) {
      const float p = scores[i] * inv;
      const float* vr = spans[s].v + j * head_dim;
      for (int64_t d = 0; d < head_dim; ++d) out[d] += p * vr[d];
    }
}

}  // namespace tpshard::cpu
