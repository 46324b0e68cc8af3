// moe_routing.cpp: see moe_routing.h.
#include "model/moe_routing.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace tpshard {

void route_top_k(const float* logits, int64_t n_experts, int64_t k, int32_t* ids, float* weights) {
  float max_l = -INFINITY;
  for (int64_t e = 0; e < n_experts; ++e) max_l = std::max(max_l, logits[e]);
  float denom = 0.0f;
  for (int64_t e = 0; e < n_experts; ++e) denom += std::exp(logits[e] - max_l);
  float picked = 0.0f;
  for (int64_t j = 0; j < k; ++j) {
    int32_t best = -1;
    float best_p = -1.0f;
    for (int64_t e = 0; e < n_experts; ++e) {
      bool taken = false;
      for (int64_t i = 0; i < j; ++i) taken = taken || ids[i] == e;
      const float p = std::exp(logits[e] - max_l) / denom;
      if (!taken && p > best_p) {  // strict: the lower id wins ties
        best_p = p;
        best = static_cast<int32_t>(e);
      }
    }
    ids[j] = best;
    weights[j] = best_p;
    picked += best_p;
  }
  for (int64_t j = 0; j < k; ++j) weights[j] /= picked;
}

MoePermutation moe_permutation(const int32_t* ids, int64_t entries, int64_t experts) {
  MoePermutation p;
  p.counts.assign(static_cast<size_t>(experts), 0);
  for (int64_t i = 0; i < entries; ++i) {
    if (ids[i] < 0 || ids[i] >= experts)
      throw std::out_of_range("moe_permutation: expert id " + std::to_string(ids[i]) + " outside 0.." +
                              std::to_string(experts - 1));
    ++p.counts[static_cast<size_t>(ids[i])];
  }
  p.offsets.assign(static_cast<size_t>(experts) + 1, 0);
  for (int64_t e = 0; e < experts; ++e) {
    const int64_t padded = (p.counts[e] + kMoeRowAlign - 1) / kMoeRowAlign * kMoeRowAlign;
    p.offsets[e + 1] = static_cast<int32_t>(p.offsets[e] + padded);
  }
  std::vector<int32_t> cursor(p.offsets.begin(), p.offsets.end() - 1);
  p.slots.resize(static_cast<size_t>(entries));
  for (int64_t i = 0; i < entries; ++i) p.slots[i] = cursor[ids[i]]++;
  return p;
}

}  // namespace tpshard
