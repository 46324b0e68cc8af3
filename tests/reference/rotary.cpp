// rotary.cpp: reference rotary embedding, Hugging Face rotate_half convention (kernels/rotary.cu):
// q_embed = q * cos + rotate_half(q) * sin, rotate_half(x) = cat(-x2, x1) over the rotary dims.
#include <cmath>

#include "tests/reference/reference.h"

namespace tpshard::ref {

std::vector<double> inv_freq_default(double theta, int rotary_ndims) {
  std::vector<double> f(rotary_ndims / 2);
  for (int i = 0; i < rotary_ndims / 2; ++i) f[i] = 1.0 / std::pow(theta, 2.0 * i / rotary_ndims);
  return f;
}

void rotary(Vec& qkv, int64_t row_stride, const std::vector<int32_t>& positions, const std::vector<double>& inv_freq,
            int num_heads, int num_kv_heads, int head_dim, int rotary_ndims) {
  const int half = rotary_ndims / 2;
  for (size_t t = 0; t < positions.size(); ++t) {
    for (int h = 0; h < num_heads + num_kv_heads; ++h) {
      double* x = &qkv[t * row_stride + static_cast<size_t>(h) * head_dim];
      for (int i = 0; i < half; ++i) {
        const double a = positions[t] * inv_freq[i];
        const double x1 = x[i], x2 = x[i + half];
        x[i] = x1 * std::cos(a) - x2 * std::sin(a);
        x[i + half] = x2 * std::cos(a) + x1 * std::sin(a);
      }
    }
  }
}

}  // namespace tpshard::ref
