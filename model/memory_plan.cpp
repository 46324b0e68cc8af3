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
  MemoryPlan p;
  p.tp_size = tp_size;
  p.batch = batch;
  p.max_seq = max_seq;
  const uint64_t e = dtype_size(m.dtype);
  const uint64_t kv_e = kv_dtype_bytes ? kv_dtype_bytes : e;
  const uint64_t B = static_cast<uint64_t>(batch), S = static_cast<uint64_t>(max_seq);
  const int64_t R = decode_bucket(static_cast<int>(std::min<int64_t>(batch, 1 << 30)));
  const int64_t T = step_tokens(batch, max_seq, R);
  p.workspace_bytes = kWorkspaceBytes;
  for (int r = 0; r < tp_size; ++r) {
    const TpRankRanges& L = layout.tp(r);
    RankMemory q;
    q.tp_rank = r;
    q.weight_bytes = shards[static_cast<size_t>(r)].weight_bytes;
    q.kv_cache_bytes = 2 * static_cast<uint64_t>(c.num_hidden_layers) * (B + 1) * S *
                       static_cast<uint64_t>(L.kv_heads.size()) * static_cast<uint64_t>(c.head_dim) * kv_e;
    q.activation_bytes = plan_activations(c, L, tp_size, e, T, R).total();
    q.total_bytes = q.weight_bytes + q.kv_cache_bytes + q.activation_bytes + p.workspace_bytes;
    p.weight_bytes = std::max(p.weight_bytes, q.weight_bytes);
    p.kv_cache_bytes = std::max(p.kv_cache_bytes, q.kv_cache_bytes);
    p.activation_bytes = std::max(p.activation_bytes, q.activation_bytes);
    p.ranks.push_back(q);
    if (q.weight_bytes > p.ranks[static_cast<size_t>(p.heaviest_rank)].weight_bytes) p.heaviest_rank = r;
  }
  return p;
}

}  // namespace tpshard
