// test_moe_routing.cpp: mixture-of-experts routing (model/moe_routing.h): top_k of the softmax,
// renormalized, and the permutation grouping routing entries by expert, hand-computed.
#include <doctest/doctest.h>

#include <cmath>
#include <stdexcept>
#include <vector>

#include "model/moe_routing.h"

using namespace tpshard;

TEST_CASE("route_top_k: softmax, the 2 largest renormalized, ties to the lower expert id") {
  const std::vector<float> logits = {0.0f, 2.0f, 1.0f, 2.0f};
  int32_t ids[2];
  float w[2];
  route_top_k(logits.data(), 4, 2, ids, w);
  CHECK(ids[0] == 1);  // experts 1 and 3 tie: the lower id first
  CHECK(ids[1] == 3);
  CHECK(w[0] == doctest::Approx(0.5f));
  CHECK(w[1] == doctest::Approx(0.5f));
  const std::vector<float> l2 = {std::log(1.0f), std::log(3.0f), std::log(6.0f)};
  route_top_k(l2.data(), 3, 2, ids, w);
  CHECK(ids[0] == 2);
  CHECK(ids[1] == 1);
  CHECK(w[0] == doctest::Approx(6.0 / 9.0).epsilon(1e-6));
  CHECK(w[1] == doctest::Approx(3.0 / 9.0).epsilon(1e-6));
}

TEST_CASE("moe_permutation: counts, aligned offsets and stable slots per expert") {
  // 3 tokens, top 2: (t0: 2, 0), (t1: 0, 3), (t2: 2, 3); 4 experts, expert 1 unused
  const std::vector<int32_t> ids = {2, 0, 0, 3, 2, 3};
  const MoePermutation p = moe_permutation(ids.data(), 6, 4);
  CHECK(p.counts == std::vector<int32_t>{2, 0, 2, 2});
  const int32_t A = static_cast<int32_t>(kMoeRowAlign);
  CHECK(p.offsets == std::vector<int32_t>{0, A, A, 2 * A, 3 * A});
  // expert 0: entries 1 (t0), 2 (t1); expert 2: entries 0 (t0), 4 (t2); expert 3: entries 3 (t1), 5 (t2)
  CHECK(p.slots == std::vector<int32_t>{A, 0, 1, 2 * A, A + 1, 2 * A + 1});
  CHECK(p.offsets.back() <= moe_permuted_rows(6, 4));
  CHECK_THROWS_AS(moe_permutation(std::vector<int32_t>{4}.data(), 1, 4), std::out_of_range);
}

TEST_CASE("moe_permutation: every entry gets its own row, inside its expert's group, within the bound") {
  const int64_t E = 8, K = 2, T = 37;
  std::vector<int32_t> ids(T * K);
  for (int64_t t = 0; t < T; ++t) {
    ids[t * K] = static_cast<int32_t>((t * 5) % E);
    ids[t * K + 1] = static_cast<int32_t>((t * 5 + 1 + t % 3) % E);
  }
  const MoePermutation p = moe_permutation(ids.data(), T * K, E);
  REQUIRE(p.offsets.back() <= moe_permuted_rows(T * K, E));
  std::vector<int> used(static_cast<size_t>(p.offsets.back()), 0);
  for (int64_t i = 0; i < T * K; ++i) {
    const int32_t e = ids[i], s = p.slots[i];
    CHECK(s >= p.offsets[e]);
    CHECK(s < p.offsets[e] + p.counts[e]);
    CHECK(p.offsets[e] % kMoeRowAlign == 0);
    ++used[s];
  }
  int64_t total = 0;
  for (int u : used) {
    CHECK(u <= 1);
    total += u;
  }
  CHECK(total == T * K);
}
