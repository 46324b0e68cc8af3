// logits.cuh: logits handling for vocab-parallel output: gather the last token row of each chunk,
// and the per-rank argmax (max value and its global id, vocab padding masked) that the runner
// all_gathers so greedy decode never moves full logits. Ties: lowest id wins (torch.argmax).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "format/dtype.h"

namespace tpshard::cuda {

/// A (value, global token id) pair: 8 bytes, all_gathered as 2 f32 words.
struct ArgmaxPair {
  float value;
  int32_t index;
};

struct ArgmaxParams {
  const float* logits = nullptr;  ///< [n, vocab_per_rank] f32, device
  ArgmaxPair* out = nullptr;      ///< [n], device
  int n = 0;
  int64_t vocab_per_rank = 0;
  int64_t vocab_begin = 0;        ///< global id of column 0
  int64_t vocab_size = 0;         ///< unpadded: columns with global id >= vocab_size are ignored
};

/// out[t] = (max over valid columns, lowest global id attaining it). NaN never wins.
void vocab_argmax(const ArgmaxParams& p, cudaStream_t stream);

/// Merge the per-rank pairs gathered as [tp_size, n]: the largest value, lowest id on ties.
/// Host function (n * tp_size pairs).
void merge_argmax(const ArgmaxPair* gathered, int tp_size, int n, int32_t* out);

/// dst[i, :] = src[rows[i], :] for i < n_rows; src [*, width], dst [n_rows, width], of dtype.
void gather_rows(const void* src, void* dst, const int32_t* rows, int n_rows, int width, DType dtype,
                 cudaStream_t stream);

}  // namespace tpshard::cuda
