// moe.cpp: reference mixture-of-experts MLP (kernels/moe_block.cuh), in double precision.
#include <algorithm>
#include <cmath>

#include "tests/reference/reference.h"

namespace tpshard::ref {

Vec moe_block(const Vec& x, const Vec& router_w, const Vec& gate_up_w, const Vec& down_w, Activation act, int n,
              int hidden, int inter, int experts, int top_k, std::vector<int32_t>* ids) {
  const size_t H = static_cast<size_t>(hidden), I = static_cast<size_t>(inter);
  Vec out(static_cast<size_t>(n) * H, 0.0);
  if (ids) ids->assign(static_cast<size_t>(n) * top_k, -1);
  const Vec logits = linear(x, router_w, {}, 0, n, experts, hidden);
  for (int t = 0; t < n; ++t) {
    const double* l = logits.data() + static_cast<size_t>(t) * experts;
    double m = l[0], denom = 0;
    for (int e = 1; e < experts; ++e) m = std::max(m, l[e]);
    for (int e = 0; e < experts; ++e) denom += std::exp(l[e] - m);
    std::vector<double> weight(static_cast<size_t>(experts), 0.0);  // 0: not routed
    std::vector<bool> taken(static_cast<size_t>(experts), false);
    double picked = 0;
    for (int j = 0; j < top_k; ++j) {
      int best = -1;
      double best_p = -1;
      for (int e = 0; e < experts; ++e) {
        const double p = std::exp(l[e] - m) / denom;
        if (!taken[e] && p > best_p) {
          best_p = p;
          best = e;
        }
      }
      taken[best] = true;
      weight[best] = best_p;
      picked += best_p;
      if (ids) (*ids)[static_cast<size_t>(t) * top_k + j] = best;
    }
    const Vec xt(x.begin() + static_cast<long>(t * H), x.begin() + static_cast<long>((t + 1) * H));
    for (int e = 0; e < experts; ++e) {
      if (!taken[e]) continue;
      const Vec gu_w(gate_up_w.begin() + static_cast<long>(e * 2 * I * H),
                     gate_up_w.begin() + static_cast<long>((e + 1) * 2 * I * H));
      const Vec d_w(down_w.begin() + static_cast<long>(e * H * I), down_w.begin() + static_cast<long>((e + 1) * H * I));
      const Vec a = activation(linear(xt, gu_w, {}, 0, 1, 2 * inter, hidden), {}, act, true, 1, inter);
      const Vec y = linear(a, d_w, {}, 0, 1, hidden, inter);
      for (size_t i = 0; i < H; ++i) out[static_cast<size_t>(t) * H + i] += weight[e] / picked * y[i];
    }
  }
  return out;
}

}  // namespace tpshard::ref
