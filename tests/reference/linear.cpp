// linear.cpp: reference linear layer y = x W^T (+ beta y0), W [out, in] row-major (kernels/gemm.cu).
#include "tests/reference/reference.h"

namespace tpshard::ref {

Vec linear(const Vec& x, const Vec& w, const Vec& y0, double beta, int n, int out, int in) {
  Vec y(static_cast<size_t>(n) * out);
  for (int t = 0; t < n; ++t)
    for (int o = 0; o < out; ++o) {
      double s = y0.empty() ? 0.0 : beta * y0[static_cast<size_t>(t) * out + o];
      for (int i = 0; i < in; ++i) s += x[static_cast<size_t>(t) * in + i] * w[static_cast<size_t>(o) * in + i];
      y[static_cast<size_t>(t) * out + o] = s;
    }
  return y;
}

}  // namespace tpshard::ref
