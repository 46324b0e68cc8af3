// attention.cpp: reference causal attention with GQA (kernels/attention.cu): plain softmax over all
// visible keys, in double.
#include <algorithm>
#include <cmath>

#include "tests/reference/reference.h"

namespace tpshard::ref {

Vec attention(const Vec& q, int64_t q_stride, const std::vector<const Vec*>& seq_k, const std::vector<const Vec*>& seq_v,
              const std::vector<int32_t>& positions, int num_heads, int num_kv_heads, int head_dim, double scale,
              int kv_group, int head_offset, double softcap, int window) {
  const size_t n = positions.size();
  Vec out(n * num_heads * head_dim, 0.0);
  const int group = kv_group > 0 ? kv_group : num_heads / num_kv_heads;
  for (size_t t = 0; t < n; ++t) {
    const Vec& k = *seq_k[t];  // [positions, kv_heads, hd]
    const Vec& v = *seq_v[t];
    const int len = positions[t] + 1;
    const int first = window > 0 ? std::max(0, len - window) : 0;  // keys [first, len)
    for (int h = 0; h < num_heads; ++h) {
      const int kvh = (h + head_offset) / group;
      std::vector<double> s(len - first);
      for (int j = first; j < len; ++j) {
        double dot = 0;
        for (int d = 0; d < head_dim; ++d)
          dot += q[t * q_stride + h * head_dim + d] * k[(static_cast<size_t>(j) * num_kv_heads + kvh) * head_dim + d];
        s[j - first] = softcap > 0 ? softcap * std::tanh(dot * scale / softcap) : dot * scale;
      }
      const double mx = *std::max_element(s.begin(), s.end());
      double sum = 0;
      for (double& x : s) sum += (x = std::exp(x - mx));
      for (int d = 0; d < head_dim; ++d) {
        double acc = 0;
        for (int j = first; j < len; ++j)
          acc += s[j - first] * v[(static_cast<size_t>(j) * num_kv_heads + kvh) * head_dim + d];
        out[(t * num_heads + h) * head_dim + d] = acc / sum;
      }
    }
  }
  return out;
}

}  // namespace tpshard::ref
