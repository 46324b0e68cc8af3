// query_tiles.cpp: see query_tiles.h.
#include "runtime/query_tiles.h"

namespace tpshard {

int query_tiles(const int32_t* slots, const int32_t* positions, const int32_t* prefix_slots,
                const int32_t* prefix_lens, int n, int max_rows, int32_t* starts) {
  int count = 0, begin = 0;
  for (int t = 0; t < n; ++t) {
    const bool joins = t > begin && t - begin < max_rows && slots[t] == slots[t - 1] &&
                       positions[t] == positions[t - 1] + 1 && prefix_slots[t] == prefix_slots[t - 1] &&
                       prefix_lens[t] == prefix_lens[t - 1];
    if (!joins) {
      begin = t;
      starts[count++] = t;
    }
  }
  return count;
}

}  // namespace tpshard
