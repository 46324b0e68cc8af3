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
  const int64_t R = decode_bucket(static_cast<int>(std::min<int64_t>(batch, 1 << 30)));
  const int64_t T = step_tokens(batch, max_seq, R);
  p.kv_cache_bytes = 2 * static_cast<uint64_t>(c.num_hidden_layers) * (B + 1) * S * static_cast<uint64_t>(L.kv_heads.size()) *
                     static_cast<uint64_t>(c.head_dim) * kv_e;
  p.activation_bytes = plan_activations(c, L, tp_size, e, T, R).total();
  p.workspace_bytes = kWorkspaceBytes;
  return p;
}

}  // namespace tpshard
