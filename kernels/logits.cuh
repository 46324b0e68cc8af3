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

/// Greedy decode tail, on the GPU (so a decode step can feed the next one without the host; the CUDA
/// runner's lookahead, runtime/cuda/cuda_runner.cpp):
///   ids[t] = merge of pairs[r * n + t] over r < tp_size, with exactly merge_argmax's rule (largest value,
///   lowest id on ties, pairs with index < 0 ignored, 0 when no rank has a valid column);
///   when tokens != nullptr, for every t < n whose slots[t] != skip_slot and positions[t] + 1 < max_seq_len:
///   tokens[t] = ids[t] and positions[t] += 1 (the next decode step's inputs, in place). Rows of the
///   scratch slot (bucket padding) and rows at the end of the kv_cache are left as they are.
struct ArgmaxAdvanceParams {
  const ArgmaxPair* pairs = nullptr;  ///< [tp_size, n] device (this rank's argmax_local when tp_size == 1)
  int tp_size = 1;
  int n = 0;
  int32_t* ids = nullptr;             ///< [n] device, out
  int32_t* tokens = nullptr;          ///< [n] device, in/out; nullptr: no advance
  int32_t* positions = nullptr;       ///< [n] device, in/out
  const int32_t* slots = nullptr;     ///< [n] device
  int skip_slot = -1;                 ///< kv_cache slot whose rows never advance (the scratch slot)
  int max_seq_len = 0;                ///< positions stay < max_seq_len
};
void argmax_merge_advance(const ArgmaxAdvanceParams& p, cudaStream_t stream);

/// dst[i, :] = src[rows[i], :] for i < n_rows; src [*, width], dst [n_rows, width], of dtype.
void gather_rows(const void* src, void* dst, const int32_t* rows, int n_rows, int width, DType dtype,
                 cudaStream_t stream);

}  // namespace tpshard::cuda
