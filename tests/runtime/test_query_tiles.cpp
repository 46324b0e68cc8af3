// test_query_tiles.cpp: the prefill attention's query tiles (runtime/query_tiles.h) over packed steps:
// sequences split at max_rows, new tiles at a slot, position or shared-prefix change.
#include <doctest/doctest.h>

#include <cstddef>
#include <vector>

#include "runtime/query_tiles.h"

using namespace tpshard;

namespace {

struct Step {
  std::vector<int32_t> slot, pos, pslot, plen;
  /// Appends `len` tokens of slot s from position p (prefix slot ps of pl positions).
  void add(int s, int p, int len, int ps = 0, int pl = 0) {
    for (int k = 0; k < len; ++k) {
      slot.push_back(s);
      pos.push_back(p + k);
      pslot.push_back(ps);
      plen.push_back(pl);
    }
  }
  std::vector<int32_t> tiles(int max_rows) const {
    std::vector<int32_t> starts(slot.size() + 1, -1);
    const int n = query_tiles(slot.data(), pos.data(), pslot.data(), plen.data(), static_cast<int>(slot.size()),
                              max_rows, starts.data());
    CHECK(starts[slot.size()] == -1);  // writes at most n entries
    starts.resize(static_cast<std::size_t>(n));
    return starts;
  }
};

}  // namespace

TEST_CASE("query_tiles: runs of one sequence's consecutive positions, at most max_rows each") {
  Step s;
  CHECK(s.tiles(64).empty());
  s.add(3, 0, 130);  // 64 + 64 + 2
  s.add(0, 5, 1);    // a decode token
  s.add(1, 10, 64);  // exactly one tile
  CHECK(s.tiles(64) == std::vector<int32_t>{0, 64, 128, 130, 131});
  CHECK(s.tiles(1).size() == s.slot.size());
  CHECK(s.tiles(1000) == std::vector<int32_t>{0, 130, 131});
}

TEST_CASE("query_tiles: a slot, position or prefix change starts a tile") {
  Step s;
  s.add(2, 0, 3);
  s.add(2, 7, 2);        // same slot, positions jump
  s.add(4, 9, 2);        // another slot continuing the positions
  s.add(5, 20, 2, 1, 20);
  s.add(6, 22, 2, 1, 20);  // another slot after the same prefix
  s.add(6, 24, 2, 1, 22);  // same slot, prefix length differs
  s.add(6, 26, 2, 3, 22);  // prefix slot differs
  CHECK(s.tiles(64) == std::vector<int32_t>{0, 3, 5, 7, 9, 11, 13});
}
