// norm.cpp: reference residual add + LayerNorm / RMSNorm (kernels/norm.cu), the plain RMSNorm of Gemma 2's
// post-norms, and the tanh soft-cap (kernels/softcap.cu).
#include <cmath>

#include "tests/reference/reference.h"

namespace tpshard::ref {

Vec add_norm(Vec& residual, const Vec& add0, const Vec& bias0, const Vec& bias1, const Vec& weight, const Vec& bias,
             NormKind kind, double eps, int n, int hidden) {
  Vec out(static_cast<size_t>(n) * hidden);
  for (int t = 0; t < n; ++t) {
    double* x = &residual[static_cast<size_t>(t) * hidden];
    for (int i = 0; i < hidden; ++i) {
      if (!add0.empty()) x[i] += add0[static_cast<size_t>(t) * hidden + i];
      if (!bias0.empty()) x[i] += bias0[i];
      if (!bias1.empty()) x[i] += bias1[i];
    }
    double mean = 0;
    if (kind == NormKind::LayerNorm) {
      for (int i = 0; i < hidden; ++i) mean += x[i];
      mean /= hidden;
    }
    double var = 0;  // LayerNorm: biased variance; RMSNorm: mean square (mean = 0)
    for (int i = 0; i < hidden; ++i) var += (x[i] - mean) * (x[i] - mean);
    var /= hidden;
    const double rstd = 1.0 / std::sqrt(var + eps);
    for (int i = 0; i < hidden; ++i)
      out[static_cast<size_t>(t) * hidden + i] = (x[i] - mean) * rstd * weight[i] + (bias.empty() ? 0.0 : bias[i]);
  }
  return out;
}

Vec rms_norm(const Vec& x, const Vec& w, double offset, double eps, int n, int hidden) {
  Vec out(static_cast<size_t>(n) * hidden);
  for (int t = 0; t < n; ++t) {
    const double* r = &x[static_cast<size_t>(t) * hidden];
    double ss = 0;
    for (int i = 0; i < hidden; ++i) ss += r[i] * r[i];
    const double rstd = 1.0 / std::sqrt(ss / hidden + eps);
    for (int i = 0; i < hidden; ++i) out[static_cast<size_t>(t) * hidden + i] = r[i] * rstd * (offset + w[i]);
  }
  return out;
}

Vec softcap(const Vec& x, double cap) {
  Vec out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = cap * std::tanh(x[i] / cap);
  return out;
}

}  // namespace tpshard::ref
