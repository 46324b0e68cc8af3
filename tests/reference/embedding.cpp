// embedding.cpp: reference vocab-parallel embedding lookup (kernels/embedding.cu).
#include "tests/reference/reference.h"

namespace tpshard::ref {

Vec embedding(const std::vector<int32_t>& tokens, const Vec& table, int hidden, int64_t vocab_begin, int64_t vocab_per_rank) {
  Vec out(tokens.size() * hidden, 0.0);
  for (size_t t = 0; t < tokens.size(); ++t) {
    const int64_t row = tokens[t] - vocab_begin;
    if (row < 0 || row >= vocab_per_rank) continue;  // another rank's row: zeros
    for (int i = 0; i < hidden; ++i) out[t * hidden + i] = table[row * hidden + i];
  }
  return out;
}

}  // namespace tpshard::ref
