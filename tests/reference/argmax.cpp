// argmax.cpp: reference vocab-parallel argmax with padding masked (kernels/logits.cu).
#include <algorithm>

#include "tests/reference/reference.h"

namespace tpshard::ref {

std::vector<int32_t> argmax(const Vec& logits, int n, int64_t vocab_per_rank, int64_t vocab_begin, int64_t vocab_size) {
  std::vector<int32_t> out(n, -1);
  const int64_t valid = std::clamp<int64_t>(vocab_size - vocab_begin, 0, vocab_per_rank);
  for (int t = 0; t < n; ++t) {
    int64_t best = -1;
    for (int64_t i = 0; i < valid; ++i)  // strict >: the lowest id wins ties
      if (best < 0 || logits[t * vocab_per_rank + i] > logits[t * vocab_per_rank + best]) best = i;
    out[t] = best < 0 ? -1 : static_cast<int32_t>(best + vocab_begin);
  }
  return out;
}

}  // namespace tpshard::ref
