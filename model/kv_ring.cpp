// kv_ring.cpp: per-layer kv_cache capacity (see kv_ring.h).
#include "model/kv_ring.h"

#include <algorithm>
#include <climits>

namespace tpshard {

namespace {
int64_t window_of(const ModelConfig& c, int64_t layer) {
  return c.layer_windows.empty() ? 0 : c.layer_windows[static_cast<size_t>(layer)];
}
}  // namespace

int64_t kv_cache_positions(const ModelConfig& c, int64_t layer, int64_t max_seq_len) {
  const int64_t w = window_of(c, layer);
  if (w <= 0 || w > max_seq_len / 2) return max_seq_len;
  return 2 * w;
}

int64_t kv_cache_layer_positions(const ModelConfig& c, int64_t begin, int64_t end, int64_t max_seq_len) {
  int64_t sum = 0;
  for (int64_t l = begin; l < end; ++l) sum += kv_cache_positions(c, l, max_seq_len);
  return sum;
}

int64_t max_step_positions(const ModelConfig& c, int64_t max_seq_len) {
  int64_t most = INT32_MAX;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const int64_t cap = kv_cache_positions(c, l, max_seq_len);
    if (cap < max_seq_len) most = std::min(most, cap - window_of(c, l) + 1);
  }
  return most;
}

}  // namespace tpshard
