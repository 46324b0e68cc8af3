// activation.cpp: reference MLP activations (kernels/activation.cu), torch.nn.functional definitions.
#include <cmath>

#include "tests/reference/reference.h"

namespace tpshard::ref {

double activation_scalar(double x, Activation act) {
  const double pi = 3.14159265358979323846;
  switch (act) {
    case Activation::Gelu: return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
    case Activation::GeluTanh: return 0.5 * x * (1 + std::tanh(std::sqrt(2 / pi) * (x + 0.044715 * x * x * x)));
    case Activation::Silu: return x / (1 + std::exp(-x));
    case Activation::Relu: return x > 0 ? x : 0;
  }
  return x;
}

Vec activation(const Vec& in, const Vec& bias, Activation act, bool gated, int n, int width) {
  Vec out(static_cast<size_t>(n) * width);
  for (int t = 0; t < n; ++t) {
    for (int i = 0; i < width; ++i) {
      if (gated) {
        const double g = in[static_cast<size_t>(t) * 2 * width + i] + (bias.empty() ? 0 : bias[i]);
        const double u = in[static_cast<size_t>(t) * 2 * width + width + i] + (bias.empty() ? 0 : bias[width + i]);
        out[static_cast<size_t>(t) * width + i] = activation_scalar(g, act) * u;
      } else {
        out[static_cast<size_t>(t) * width + i] =
            activation_scalar(in[static_cast<size_t>(t) * width + i] + (bias.empty() ? 0 : bias[i]), act);
      }
    }
  }
  return out;
}

}  // namespace tpshard::ref
