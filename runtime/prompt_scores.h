// prompt_scores.h: log-probabilities of given tokens under the model, position by position (prompt
// log-probabilities: lm-evaluation-harness loglikelihood requests, OpenAI echo + logprobs). Built on
// ModelRunner::forward with SeqChunk::all_logits; the full [tokens x vocab] logits are never held at
// once: a forward returns at most kScoreRowFloats / vocab rows, each reduced on the host to the
// requested token's log-probability and the top-k, then dropped. Shared by all backends and layouts.
#pragma once
#include <cstdint>
#include <vector>

#include "runtime/model_runner.h"

namespace tpshard {

/// Logits floats one forward of score_sequences() returns at most (64 MiB of f32).
constexpr int64_t kScoreRowFloats = int64_t{16} << 20;

/// log p(token | the tokens before it) and the top-k alternatives at that position.
struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0;  ///< natural log, log_softmax of the f32 logits (computed in f64)
  /// The top_k most likely tokens at this position, most likely first (ties: lowest id first).
  std::vector<std::pair<int32_t, float>> top;
};

/// Scores of one sequence: entry i is about tokens[i + 1] (the first token has no prediction), so
/// tokens.size() - 1 entries; greedy[i] = tokens[i + 1] is the argmax at its position.
struct SequenceScores {
  std::vector<TokenLogprob> tokens;
  std::vector<bool> greedy;
};

/// Runs each sequence (>= 1 token, ids < vocab_size) through a kv_cache slot from position 0 (slots 0..
/// max_batch - 1, reused: their previous contents are overwritten), several sequences per forward, and
/// returns their scores in order. top_k 0: no alternatives. Collective (SPMD): every rank calls it with
/// the same arguments and gets the same results. Throws Error (runner's) when a sequence exceeds
/// max_seq_len.
std::vector<SequenceScores> score_sequences(ModelRunner& runner, const std::vector<std::vector<int32_t>>& sequences,
                                            int top_k);

/// log_softmax of row[vocab] at `token`, and the top_k entries (most likely first, lowest id on ties).
TokenLogprob row_logprob(const float* row, int64_t vocab, int32_t token, int top_k);

}  // namespace tpshard
