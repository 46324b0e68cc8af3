// generate.h: batched generation shared by all backends (SPMD: every rank runs it with identical
// inputs and takes identical decisions, so no sampling state crosses ranks).
// Owns: scheduling requests into kv_cache slots (prefill, then decode), sampling, stopping.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "runtime/model_runner.h"
#include "tokenizer/tokenizer.h"

namespace tpshard {

/// Options spelled as Hugging Face generate() spells them.
struct SamplingParams {
  int max_new_tokens = 128;
  int min_new_tokens = 0;            ///< EOS is masked until this many tokens were generated
  float temperature = 0.0f;          ///< 0 = greedy
  int top_k = 0;                     ///< 0 = off
  float top_p = 1.0f;                ///< 1 = off
  float min_p = 0.0f;                ///< 0 = off
  float repetition_penalty = 1.0f;   ///< 1 = off (CTRL paper, as in HF RepetitionPenaltyLogitsProcessor)
  uint64_t seed = 0;                 ///< per-request RNG stream = f(seed, request index)
  std::vector<std::string> stop;     ///< stop strings: generation ends when the text contains one (excluded from output)
  bool ignore_eos = false;
};

struct GenerationRequest {
  std::string id;                    ///< kept in outputs
  std::vector<int32_t> prompt_ids;   ///< at least one token (BOS for an empty prompt)
  SamplingParams params;
};

struct GenerationResult {
  std::string id;
  std::vector<int32_t> output_ids;   ///< generated ids only
  std::string text;                  ///< decoded output (stop string removed)
  std::string finish_reason;         ///< "eos", "length" or "stop"
  int prompt_tokens = 0;
};

struct GenerationStats {
  int64_t prefill_tokens = 0;
  int64_t decode_tokens = 0;   ///< tokens generated
  double prefill_seconds = 0;
  double decode_seconds = 0;
};

/// Callbacks (called on every rank; print only where tp_rank == 0).
struct GenerateCallbacks {
  std::function<void(size_t request_index, const std::string& text_piece)> on_text;  ///< streamed text
  std::function<void(size_t request_index, const GenerationResult&)> on_done;       ///< a request finished
};

/// Generate for all requests, at most runner.max_batch() at a time (a finished request's slot is
/// reused by the next). Results are in request order. Throws Error when a prompt (+ max_new_tokens)
/// does not fit max_seq_len, naming the request id.
std::vector<GenerationResult> generate(ModelRunner& runner, const Tokenizer& tokenizer,
                                       const std::vector<GenerationRequest>& requests,
                                       const GenerateCallbacks& callbacks = {}, GenerationStats* stats = nullptr);

}  // namespace tpshard
