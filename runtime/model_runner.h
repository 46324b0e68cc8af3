// model_runner.h: the interface between the shared generation code and a backend's transformer.
// Implementations: runtime/cpu/cpu_runner (fp32 reference), runtime/cuda/cuda_runner (kernels + NCCL).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model/model_config.h"

namespace tpshard {

/// One sequence's work in a forward step: feed `tokens` at positions start_pos, start_pos+1, ...
/// of kv_cache slot `slot` (prefill: the prompt, or a piece of it; decode: one token).
struct SeqChunk {
  int slot = 0;                 ///< kv_cache row, 0 <= slot < max_batch
  int start_pos = 0;            ///< tokens already in this slot's cache (their K/V are reused)
  std::vector<int32_t> tokens;  ///< at least one
  /// Hint: the caller will not continue this sequence after this forward() (e.g. its max_new_tokens is
  /// reached). A runner that computes decode steps ahead (the CUDA runner's lookahead) skips that work.
  /// Results never depend on it.
  bool last_step = false;
  /// Shared prefix (read-only): positions [0, prefix_len) of this sequence are the K/V that an earlier
  /// forward() wrote to kv_cache slot prefix_slot; this chunk's slot holds the positions from prefix_len
  /// on (at their own indices). Several sequences may name the same prefix_slot; none writes to it.
  /// Requires prefix_slot != slot and prefix_len <= start_pos. prefix_slot -1 (prefix_len 0): none.
  int prefix_slot = -1;
  int prefix_len = 0;
  /// Outputs (logits / argmax rows) for every token of the chunk, in order, instead of its last token
  /// only: row i is the next-token distribution after tokens[0..i] (prompt log-probabilities).
  bool all_logits = false;
};

/// Output rows of a forward() over chunks: one per chunk, or one per token of an all_logits chunk.
inline size_t output_rows(const std::vector<SeqChunk>& chunks) {
  size_t rows = 0;
  for (const SeqChunk& c : chunks) rows += c.all_logits ? c.tokens.size() : 1;
  return rows;
}

/// A transformer with its shard of weights and its kv_cache, on one tp_rank. SPMD: every rank of the
/// group calls forward() with identical chunks in the same order.
class ModelRunner {
 public:
  virtual ~ModelRunner() = default;
  virtual const ModelConfig& config() const = 0;
  virtual int max_batch() const = 0;    ///< kv_cache slots
  virtual int max_seq_len() const = 0;  ///< positions per slot
  /// Bytes of this rank's weights / kv_cache in the backend's memory (for reports; 0 when unknown).
  virtual uint64_t weight_bytes() const { return 0; }
  virtual uint64_t kv_cache_bytes() const { return 0; }
  /// Pipeline stages only: one line measuring this stage's forward() time and the part of it spent
  /// waiting for other stages (the bubble); empty otherwise.
  virtual std::string pipeline_report() const { return {}; }
  /// Run the chunks (positions of each start at its start_pos; no chunk sees another's tokens, except
  /// the shared prefix it names, which no chunk of the same call may write), append
  /// their K/V to the kv_cache, and for each chunk's last token (every token of an all_logits chunk),
  /// rows = output_rows(chunks) in chunk order, write (either output may be null):
  ///   logits [rows, vocab_size] f32 host memory, full vocabulary, vocab padding removed;
  ///   argmax [rows] token ids (greedy; lowest id wins ties).
  /// Both outputs are identical on every rank. Throws Error when a chunk exceeds max_seq_len.
  virtual void forward(const std::vector<SeqChunk>& chunks, float* logits, int32_t* argmax) = 0;
};

}  // namespace tpshard
