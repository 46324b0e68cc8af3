// kv_ring.h: how many positions of kv_cache each layer keeps per slot. A global layer keeps every
// position up to max_seq_len; a local (windowed) layer (GPT-Neo's local layers, Mistral / Qwen2 / Phi-3
// sliding windows) keeps a ring: position p lives at index p % capacity, and a query at p reads only
// p - window < j <= p, so older positions are overwritten when no query can see them any more.
// One step (forward) may write several consecutive positions of a sequence before its queries read the
// cache, so the ring is longer than the window: capacity = min(max_seq_len, 2 * window), and one step
// holds at most capacity - window + 1 positions of a sequence (max_step_positions; runtime/chunk_rounds.h
// splits longer chunks). The CPU runner, the CUDA kernels and the memory plan all size from here.
#pragma once
#include <cstdint>

#include "model/model_config.h"

namespace tpshard {

/// Positions per slot kept by `layer`'s kv_cache (ring capacity on a local layer). Requires max_seq_len >= 1.
int64_t kv_cache_positions(const ModelConfig& c, int64_t layer, int64_t max_seq_len);

/// Sum over layers [begin, end) of kv_cache_positions: the kv_cache of those layers holds
/// 2 (K and V) * slots * kv_heads_per_rank * head_dim * dtype bytes per position counted here.
int64_t kv_cache_layer_positions(const ModelConfig& c, int64_t begin, int64_t end, int64_t max_seq_len);

/// Most consecutive positions of one sequence one forward step may hold so that no ring overwrites a
/// key a query of the same step still reads: min over ring layers of capacity - window + 1; INT32_MAX
/// when no layer is a ring (every layer keeps max_seq_len positions).
int64_t max_step_positions(const ModelConfig& c, int64_t max_seq_len);

}  // namespace tpshard
