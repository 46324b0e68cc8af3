// chunk_rounds.h: one forward() over chunks too long for one step of a ring kv_cache (model/kv_ring.h),
// run as rounds: round r feeds piece r (at most max_positions tokens) of every chunk that has one, so
// every sequence's positions still arrive in order. The outputs are those of the unsplit call: the
// row of a chunk's last token (all rows of an all_logits chunk), in output_rows() order.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "runtime/model_runner.h"

namespace tpshard {

/// A forward() over chunks none of which exceeds the step limit (the backend's own).
using ForwardFn = std::function<void(const std::vector<SeqChunk>& chunks, float* logits, int32_t* argmax)>;

/// True when some chunk holds more than max_positions tokens.
bool needs_rounds(const std::vector<SeqChunk>& chunks, int64_t max_positions);

/// Run chunks through step in rounds of pieces of at most max_positions (>= 1) tokens; logits
/// [output_rows(chunks), vocab_size] and argmax [output_rows(chunks)] as ModelRunner::forward (either
/// may be null). The row a non-last piece of a chunk yields is discarded (all_logits chunks keep every row).
void forward_in_rounds(const std::vector<SeqChunk>& chunks, int64_t max_positions, int64_t vocab_size, float* logits,
                       int32_t* argmax, const ForwardFn& step);

}  // namespace tpshard
