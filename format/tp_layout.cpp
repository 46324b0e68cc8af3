// tp_layout.cpp: make_tp_layout, the single place where per-rank sizes are derived (Megatron-LM
// partitioning: heads, KV heads with replication, intermediate size, padded vocabulary).
#include <numeric>
#include <string>

#include "format/error.h"
#include "format/model_config.h"

namespace tpshard {

namespace {

/// Problem with this tp_size, or empty when it is usable.
std::string tp_problem(const ModelConfig& c, int tp) {
  const auto s = [](int64_t v) { return std::to_string(v); };
  if (c.num_attention_heads % tp != 0)
    return "num_attention_heads " + s(c.num_attention_heads) + " is not divisible by tp_size " + s(tp);
  if (c.num_key_value_heads >= tp) {
    if (c.num_key_value_heads % tp != 0)
      return "num_key_value_heads " + s(c.num_key_value_heads) + " is not divisible by tp_size " + s(tp);
  } else if (tp % c.num_key_value_heads != 0) {
    return "tp_size " + s(tp) + " is not a multiple of num_key_value_heads " + s(c.num_key_value_heads) +
           " (KV heads can only be replicated evenly)";
  }
  if (c.intermediate_size % tp != 0)
    return "intermediate_size " + s(c.intermediate_size) + " is not divisible by tp_size " + s(tp);
  return {};
}

}  // namespace

int64_t TpLayout::first_kv_head(int tp_rank, const ModelConfig& c) const {
  if (kv_heads_replicated) return tp_rank / (tp_size / c.num_key_value_heads);
  return static_cast<int64_t>(tp_rank) * num_kv_heads_per_rank;
}

TpLayout make_tp_layout(const ModelConfig& c, int tp_size) {
  if (tp_size < 1 || tp_size > kMaxTpSize)
    throw Error("tp_size " + std::to_string(tp_size) + " is out of range",
                "use a tp_size between 1 and " + std::to_string(kMaxTpSize));
  const std::string problem = tp_problem(c, tp_size);
  if (!problem.empty()) {
    std::string ok;
    for (int t = 1; t <= 64; ++t)
      if (tp_problem(c, t).empty()) ok += (ok.empty() ? "" : ", ") + std::to_string(t);
    throw Error(c.architecture + " (" + std::to_string(c.num_attention_heads) + " heads, " +
                    std::to_string(c.num_key_value_heads) + " KV heads): " + problem,
                "tp sizes this model accepts: " + ok);
  }
  TpLayout l;
  l.tp_size = tp_size;
  l.num_heads_per_rank = c.num_attention_heads / tp_size;
  l.kv_heads_replicated = tp_size > c.num_key_value_heads;
  l.num_kv_heads_per_rank = l.kv_heads_replicated ? 1 : c.num_key_value_heads / tp_size;
  l.intermediate_size_per_rank = c.intermediate_size / tp_size;
  l.vocab_size_padded = (c.vocab_size + tp_size - 1) / tp_size * tp_size;
  l.vocab_size_per_rank = l.vocab_size_padded / tp_size;
  return l;
}

}  // namespace tpshard
