// rank_order_sum.h: the one summation order of the CPU communicators (ThreadComm, GlooComm): every rank
// adds all ranks' inputs in rank order 0..n-1 in f32, so all ranks, and both communicators, get bitwise
// the same all_reduce result whatever the timing or transport.
#pragma once
#include <cstddef>
#include <vector>

#include "format/dtype.h"

namespace tpshard {

/// (*sum)[i] = ((0 + parts[0][i]) + parts[1][i]) + ... in f32; parts hold count elements of dtype (F32,
/// F16 or BF16; F16/BF16 widened exactly). sum is resized to count.
void sum_in_rank_order(const std::vector<const void*>& parts, size_t count, DType dtype, std::vector<float>* sum);

/// buf[i] = sum[i] as dtype (F16/BF16 rounded once), count elements.
void store_sum(const std::vector<float>& sum, void* buf, size_t count, DType dtype);

}  // namespace tpshard
