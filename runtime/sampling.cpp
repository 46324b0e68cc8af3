// sampling.cpp: logits processors and the seeded sampler (see sampling.h for the HF references).
#include "runtime/sampling.h"

#include <algorithm>
#include <cmath>
#include <unordered_set>

namespace tpshard {

namespace {
uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

struct Candidate {
  float score;
  int32_t id;
};
}  // namespace

double counter_uniform(uint64_t seed, uint64_t request_index, uint64_t step) {
  const uint64_t h = splitmix64(splitmix64(splitmix64(seed) ^ request_index) ^ step);
  return static_cast<double>(h >> 11) * 0x1.0p-53;  // 53 random bits -> [0, 1)
}

void apply_repetition_penalty(float* logits, int64_t vocab, const std::vector<int32_t>& ids, float penalty) {
  if (penalty == 1.0f) return;
  std::unordered_set<int32_t> seen;
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab || !seen.insert(id).second) continue;
    float& s = logits[id];
    s = s < 0.0f ? s * penalty : s / penalty;
  }
}

int32_t argmax_token(const float* logits, int64_t vocab) {
  int32_t best = 0;
  float best_v = -INFINITY;
  for (int64_t i = 0; i < vocab; ++i)
    if (logits[i] > best_v) {
      best_v = logits[i];
      best = static_cast<int32_t>(i);
    }
  return best;
}

int32_t sample_token(const float* logits, int64_t vocab, const SamplingParams& p, double u) {
  if (p.temperature <= 0.0f) return argmax_token(logits, vocab);
  std::vector<Candidate> c;
  c.reserve(static_cast<size_t>(vocab));
  for (int64_t i = 0; i < vocab; ++i)
    if (logits[i] > -INFINITY) c.push_back({logits[i] / p.temperature, static_cast<int32_t>(i)});
  if (c.empty()) return argmax_token(logits, vocab);
  auto by_score = [](const Candidate& a, const Candidate& b) { return a.score > b.score || (a.score == b.score && a.id < b.id); };
  std::sort(c.begin(), c.end(), by_score);

  if (p.top_k > 0 && static_cast<size_t>(p.top_k) < c.size()) {
    const float threshold = c[p.top_k - 1].score;
    size_t keep = p.top_k;
    while (keep < c.size() && c[keep].score >= threshold) ++keep;  // ties at the threshold stay
    c.resize(keep);
  }
  auto probs_of = [](const std::vector<Candidate>& cs) {
    std::vector<double> pr(cs.size());
    double total = 0;
    for (size_t i = 0; i < cs.size(); ++i) total += pr[i] = std::exp(static_cast<double>(cs[i].score) - cs[0].score);
    for (double& x : pr) x /= total;
    return pr;
  };
  if (p.top_p < 1.0f) {
    // HF TopP: drop tokens whose ascending cumulative probability is <= 1 - top_p; keep at least one.
    const std::vector<double> pr = probs_of(c);
    double tail = 0;
    size_t keep = c.size();
    for (size_t i = c.size(); i-- > 1;) {
      tail += pr[i];
      if (tail <= 1.0 - p.top_p) keep = i;
      else break;
    }
    c.resize(keep);
  }
  if (p.min_p > 0.0f) {
    const std::vector<double> pr = probs_of(c);
    size_t keep = 1;
    while (keep < c.size() && pr[keep] >= p.min_p * pr[0]) ++keep;
    c.resize(keep);
  }
  const std::vector<double> pr = probs_of(c);
  double cum = 0;
  for (size_t i = 0; i < c.size(); ++i) {
    cum += pr[i];
    if (u < cum) return c[i].id;
  }
  return c.back().id;
}

}  // namespace tpshard
