// activation_plan.cpp: see activation_plan.h.
#include "model/activation_plan.h"

#include <algorithm>

#include "model/moe_routing.h"

namespace tpshard {

int64_t step_tokens(int64_t batch, int64_t max_seq, int64_t rows, int64_t step) {
  const int64_t cap = batch > 0 && max_seq > INT64_MAX / batch ? INT64_MAX : batch * max_seq;
  return std::max<int64_t>(rows, std::min<int64_t>(step, cap));
}

uint64_t ActivationPlan::total() const {
  return meta + residual + h1 + h2 + qkv + attn + ffn + act + out + last + logits + argmax + argmax_partial +
         argmax_counters + attention_partial + attention_counters + cascade_partial + gathered_logits + gathered_argmax +
         moe + qk_sums;
}

ActivationPlan plan_activations(const ModelConfig& c, const TpRankRanges& r, int tp_size, uint64_t e, int64_t tokens,
                                int64_t rows) {
  const uint64_t T = static_cast<uint64_t>(tokens), R = static_cast<uint64_t>(rows);
  const uint64_t H = static_cast<uint64_t>(c.hidden_size), hd = static_cast<uint64_t>(c.head_dim);
  const uint64_t heads = static_cast<uint64_t>(r.heads.size()), kvh = static_cast<uint64_t>(r.kv_heads.size());
  const uint64_t ipr = static_cast<uint64_t>(r.mlp_columns.size()), vpr = static_cast<uint64_t>(r.vocab_rows.size());
  const uint64_t tp = static_cast<uint64_t>(tp_size);
  constexpr uint64_t kPair = 8;  // ArgmaxPair: f32 value + int32 id
  ActivationPlan p;
  p.meta = kStepMetaArrays * T * 4;
  p.residual = T * H * 4;
  p.h1 = p.h2 = p.out = T * H * e;
  p.qkv = T * (heads + 2 * kvh) * hd * e;
  p.attn = T * heads * hd * e;
  const uint64_t E = static_cast<uint64_t>(c.num_local_experts), K = E > 0 ? static_cast<uint64_t>(c.num_experts_per_tok) : 1;
  p.ffn = T * (c.gated_mlp ? 2 : 1) * ipr * e;
  p.act = T * ipr * e;
  if (c.qk_norm_across_heads) p.qk_sums = T * 2 * 4;
  if (E > 0) {
    const uint64_t rows = static_cast<uint64_t>(moe_permuted_rows(static_cast<int64_t>(T * K), static_cast<int64_t>(E)));
    p.moe = T * E * 4 + T * K * 3 * 4 + (2 * E + 1) * 4 + 2 * rows * H * e + T * H * 4;
  }
  p.last = R * H * e;
  p.logits = R * vpr * 4;
  p.argmax = R * kPair;
  p.argmax_partial = R * kArgmaxMaxSplits * kPair;
  p.argmax_counters = R * 4;
  p.attention_partial = R * heads * kAttentionMaxSplits * (hd + 2) * 4;
  p.attention_counters = R * heads * 4;
  p.cascade_partial = R * heads * kCascadeMaxSplits * (hd + 2) * 4;
  p.gathered_logits = tp * R * vpr * 4;
  p.gathered_argmax = tp * R * kPair;
  return p;
}

}  // namespace tpshard
