// sampling.h: next-token selection from full-vocabulary logits, as Hugging Face generate() does it
// (RepetitionPenaltyLogitsProcessor, MinNewTokensLengthLogitsProcessor, then the Temperature, TopK,
// TopP and MinP warpers, in that order), with a counter-based RNG so a request's samples depend only
// on (seed, request index, step), never on batching or thread timing.
#pragma once
#include <cstdint>
#include <vector>

#include "runtime/generate.h"

namespace tpshard {

/// Uniform double in [0, 1) from a counter: SplitMix64 finalizer (Steele et al., "Fast splittable
/// pseudorandom number generators", 2014) applied to the mixed (seed, request_index, step).
double counter_uniform(uint64_t seed, uint64_t request_index, uint64_t step);

/// HF RepetitionPenaltyLogitsProcessor (CTRL, Keskar et al. 2019): for each distinct id in `ids`,
/// logit < 0 ? logit * penalty : logit / penalty. logits [vocab]; ids outside [0, vocab) are ignored.
void apply_repetition_penalty(float* logits, int64_t vocab, const std::vector<int32_t>& ids, float penalty);

/// Index of the largest value, lowest index on ties (greedy decoding). NaNs never win.
int32_t argmax_token(const float* logits, int64_t vocab);

/// Pick a token from already-penalised logits [vocab]. temperature <= 0: argmax_token. Otherwise
/// divide by temperature, keep the top_k largest (ties at the threshold kept, like torch.topk masking),
/// the smallest top set with probability mass >= top_p, tokens with p >= min_p * p_max, then return the
/// token where the cumulative probability (candidates in descending order, lowest id first on ties)
/// exceeds u * total. u in [0, 1).
int32_t sample_token(const float* logits, int64_t vocab, const SamplingParams& p, double u);

}  // namespace tpshard
