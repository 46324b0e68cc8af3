// embedding.cuh: vocab-parallel token embedding lookup into the fp32 residual stream.
// Rank r holds rows [vocab_begin, vocab_begin + vocab_per_rank) of token_embd; tokens outside that
// range give zero rows, so an all_reduce (sum) over ranks afterwards yields the full lookup
// (Megatron-LM VocabParallelEmbedding). With a learned position table (GPT-Neo wpe), the rows of
// positions[t] are added too: by one rank only, so the sum over ranks adds them once.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "format/dtype.h"

namespace tpshard::cuda {

struct EmbeddingParams {
  const int32_t* tokens = nullptr;  ///< [n] token ids (global vocabulary), device
  const void* table = nullptr;      ///< [vocab_per_rank, hidden] of `dtype`, device
  float* out = nullptr;             ///< [n, hidden] f32, device
  DType dtype = DType::F16;
  int n = 0;
  int hidden = 0;
  int64_t vocab_begin = 0;          ///< first global id this rank holds
  int64_t vocab_per_rank = 0;
  /// The embeddings are multiplied by this, rounded to dtype, the product rounded to dtype (Gemma 2:
  /// sqrt(hidden_size), transformers' Gemma2TextScaledWordEmbedding); 1: none.
  float scale = 1.f;
  const void* pos_table = nullptr;     ///< optional [max_positions, hidden] of `dtype`, device; nullptr: none
  const int32_t* positions = nullptr;  ///< [n] device (with pos_table)
};

/// out[t, :] = table[tokens[t] - vocab_begin, :] (times scale, see EmbeddingParams::scale) when that row
/// is on this rank, else 0; then + pos_table[positions[t], :] (f32 sum) when pos_table is given.
void embedding_lookup(const EmbeddingParams& p, cudaStream_t stream);

}  // namespace tpshard::cuda
