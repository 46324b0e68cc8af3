// test_sampling.cpp: logits processors and the seeded sampler against hand-computed cases.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "runtime/sampling.h"

using namespace tpshard;

namespace {
std::vector<float> logits_of(const std::vector<double>& probs) {
  std::vector<float> l;
  for (double p : probs) l.push_back(static_cast<float>(std::log(p)));
  return l;
}
SamplingParams temp1() {
  SamplingParams p;
  p.temperature = 1.0f;
  return p;
}
}  // namespace

TEST_CASE("counter_uniform is a pure function of (seed, request, step), in [0, 1)") {
  CHECK(counter_uniform(1, 2, 3) == counter_uniform(1, 2, 3));
  CHECK(counter_uniform(1, 2, 3) != counter_uniform(1, 2, 4));
  CHECK(counter_uniform(1, 2, 3) != counter_uniform(1, 3, 3));
  CHECK(counter_uniform(1, 2, 3) != counter_uniform(2, 2, 3));
  double mean = 0;
  for (uint64_t s = 0; s < 10000; ++s) {
    const double u = counter_uniform(7, 0, s);
    REQUIRE(u >= 0.0);
    REQUIRE(u < 1.0);
    mean += u / 10000;
  }
  CHECK(mean == doctest::Approx(0.5).epsilon(0.02));
}

TEST_CASE("repetition penalty (HF/CTRL): positive logits divided, negative multiplied, each id once") {
  std::vector<float> l = {2, -2, 1, 3};
  apply_repetition_penalty(l.data(), 4, {0, 1, 1, 9}, 2.0f);
  CHECK(l == std::vector<float>{1, -4, 1, 3});
}

TEST_CASE("greedy: argmax with the lowest id on ties") {
  const std::vector<float> l = {1, 3, 3, 2};
  CHECK(argmax_token(l.data(), 4) == 1);
  SamplingParams p;  // temperature 0
  CHECK(sample_token(l.data(), 4, p, 0.99) == 1);
}

TEST_CASE("temperature sampling walks the cumulative distribution") {
  const std::vector<float> l = logits_of({0.5, 0.3, 0.2});
  const SamplingParams p = temp1();
  CHECK(sample_token(l.data(), 3, p, 0.0) == 0);
  CHECK(sample_token(l.data(), 3, p, 0.49) == 0);
  CHECK(sample_token(l.data(), 3, p, 0.51) == 1);
  CHECK(sample_token(l.data(), 3, p, 0.79) == 1);
  CHECK(sample_token(l.data(), 3, p, 0.81) == 2);
  // temperature 0.5 squares the odds: p ~ [0.25, 0.09, 0.04] / 0.38
  SamplingParams cold = p;
  cold.temperature = 0.5f;
  CHECK(sample_token(l.data(), 3, cold, 0.25 / 0.38 - 0.01) == 0);
  CHECK(sample_token(l.data(), 3, cold, 0.25 / 0.38 + 0.01) == 1);
}

TEST_CASE("top-k, top-p and min-p filters") {
  const std::vector<float> l = logits_of({0.5, 0.3, 0.2});
  SamplingParams p = temp1();
  p.top_k = 1;
  CHECK(sample_token(l.data(), 3, p, 0.99) == 0);
  p.top_k = 2;  // kept [0.5, 0.3] -> [0.625, 0.375]
  CHECK(sample_token(l.data(), 3, p, 0.6) == 0);
  CHECK(sample_token(l.data(), 3, p, 0.99) == 1);

  p = temp1();
  p.top_p = 0.6f;  // ascending cumsum 0.2, 0.5, 1.0: drop <= 0.4 -> only id 2 dropped
  CHECK(sample_token(l.data(), 3, p, 0.99) == 1);
  CHECK(sample_token(l.data(), 3, p, 0.6) == 0);
  p.top_p = 0.4f;  // drop <= 0.6: ids 2 and 1
  CHECK(sample_token(l.data(), 3, p, 0.99) == 0);

  p = temp1();
  p.min_p = 0.5f;  // keep p >= 0.25: ids 0 and 1
  CHECK(sample_token(l.data(), 3, p, 0.99) == 1);
  p.min_p = 0.7f;  // keep p >= 0.35: id 0
  CHECK(sample_token(l.data(), 3, p, 0.99) == 0);

  const std::vector<float> ties = {1, 1, 0};
  p = temp1();
  p.top_k = 1;  // ties at the threshold are kept, like HF's `scores < topk[-1]` mask
  CHECK(sample_token(ties.data(), 3, p, 0.99) == 1);
}

TEST_CASE("sampled frequencies follow the distribution") {
  const std::vector<double> probs = {0.1, 0.6, 0.3};
  const std::vector<float> l = logits_of(probs);
  const SamplingParams p = temp1();
  std::vector<int> count(3, 0);
  const int n = 20000;
  for (int s = 0; s < n; ++s) ++count[sample_token(l.data(), 3, p, counter_uniform(42, 0, s))];
  for (int i = 0; i < 3; ++i) CHECK(count[i] / static_cast<double>(n) == doctest::Approx(probs[i]).epsilon(0.05));
}
