// memory_plan.cpp: plan_memory (formula in memory_plan.h).
#include "model/memory_plan.h"

#include <algorithm>

#include "format/error.h"
#include "model/parallel_layout.h"

namespace tpshard {

MemoryPlan plan_memory(const Manifest& m, int tp_size, int64_t batch, int64_t max_seq, const std::string& model_dir,
                       size_t kv_dtype_bytes) {
  if (batch < 1 || max_seq < 1) throw Error("plan: batch and max_seq must be positive", "pass --batch B --max-seq S with B, S >= 1");
  const auto& shards = shards_for(m, tp_size, model_dir);
  const ModelConfig& c = m.model;
  const ParallelLayout layout = make_parallel_layout(c, tp_size);
  const TpRankRanges L = layout.max_counts();  // the largest rank's counts: every rank's buffers fit
  MemoryPlan p;
  p.tp_size = tp_size;
  p.batch = batch;
  p.max_seq = max_seq;
  for (const auto& s : shards) p.weight_bytes = std::max(p.weight_bytes, s.weight_bytes);
  const uint64_t e = dtype_size(m.dtype);
  const uint64_t kv_e = kv_dtype_bytes ? kv_dtype_bytes : e;
  const uint64_t B = static_cast<uint64_t>(batch), S = static_cast<uint64_t>(max_seq);
  const uint64_t R = static_cast<uint64_t>(decode_bucket(static_cast<int>(std::min<int64_t>(batch, 1 << 30))));
  const uint64_t T = std::max<uint64_t>(R, std::min<uint64_t>(kMaxStepTokens, B * S));
  const uint64_t H = static_cast<uint64_t>(c.hidden_size), hd = static_cast<uint64_t>(c.head_dim);
  const uint64_t heads = static_cast<uint64_t>(L.heads.size()), ipr = static_cast<uint64_t>(L.mlp_columns.size());
  const uint64_t vpr = static_cast<uint64_t>(L.vocab_rows.size()), tp = static_cast<uint64_t>(tp_size);
  p.kv_cache_bytes = 2 * static_cast<uint64_t>(c.num_hidden_layers) * (B + 1) * S * static_cast<uint64_t>(L.kv_heads.size()) * hd * kv_e;
  const uint64_t qkv_rows = static_cast<uint64_t>(L.heads.size() + 2 * L.kv_heads.size()) * hd;
  const uint64_t ffn_rows = ipr * (c.gated_mlp ? 2 : 1);
  p.activation_bytes = T * (H * 4 + 3 * H * e + qkv_rows * e + heads * hd * e + (ffn_rows + ipr) * e + 16) +
                       R * (H * e + (1 + tp) * vpr * 4 + 8 * (1 + tp) + heads * 16 * (hd + 2) * 4);
  p.workspace_bytes = kWorkspaceBytes;
  return p;
}

}  // namespace tpshard
