// query_tiles.h: the query tiles of a prefill step for the tensor-core prefill attention
// (kernels/attention_prefill.cuh): runs of packed tokens that one block attends with the same keys.
#pragma once
#include <cstdint>

namespace tpshard {

/// Splits the n tokens of a step (token t: kv_cache slot slots[t] at position positions[t], shared prefix
/// prefix_slots[t] / prefix_lens[t]) into tiles of consecutive tokens with the same slot and prefix and
/// consecutive positions, at most max_rows (>= 1) each. Writes the first token of each tile to starts
/// (room for n entries; tile k ends where tile k + 1 starts, the last at n) and returns the tile count
/// (0 when n is 0). Host arrays of n int32 each.
int query_tiles(const int32_t* slots, const int32_t* positions, const int32_t* prefix_slots,
                const int32_t* prefix_lens, int n, int max_rows, int32_t* starts);

}  // namespace tpshard
