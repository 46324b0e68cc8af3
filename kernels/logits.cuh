// logits.cuh: logits handling for vocab-parallel output: gather the last token row of each chunk,
// and the per-rank argmax (max value and its global id, vocab padding masked) that the runner
// all_gathers so greedy decode never moves full logits. Ties: lowest id wins (torch.argmax).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "format/dtype.h"
#include "model/activation_plan.h"

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
  /// Optional split of each row over `splits` blocks (2..kArgmaxMaxSplits; 1 = one block per row), for
  /// the few rows of a decode step, where one block per row is latency-bound (9.8 us for 50,304 columns):
  /// each block leaves its range's pair in partial[t * splits + b], and the last block of row t (counted
  /// in counters[t], which must be 0 before the call and is 0 again after it) merges them.
  ArgmaxPair* partial = nullptr;  ///< [n, splits], device
  int32_t* counters = nullptr;    ///< [n], device, zero
  int splits = 1;
};

using ::tpshard::kArgmaxMaxSplits;  // model/activation_plan.h: the runner sizes its buffers by it

/// The splits vocab_argmax should use for n rows of vocab_per_rank columns: about 2,048 columns per
/// block, only when n <= 8 (else 1).
int argmax_splits(int n, int64_t vocab_per_rank);

/// out[t] = (max over valid columns, lowest global id attaining it). NaN never wins. The same result
/// for every split. Throws Error when splits > 1 without partial / counters or out of range.
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
