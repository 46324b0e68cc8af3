// memory_plan.cpp: plan_memory (formula in memory_plan.h).
#include "model/memory_plan.h"

#include <algorithm>

#include "format/error.h"
#include "format/shard_layout.h"
#include "model/kv_ring.h"
#include "model/parallel_layout.h"
#include "model/tensor_plan.h"

namespace tpshard {

namespace {

/// The plan of `layout` on c for (batch, max_seq) with weight bytes weight_of(pp_stage, tp_rank).
template <typename WeightOf>
MemoryPlan plan_layout(const ModelConfig& c, const ParallelLayout& layout, DType dtype, int64_t batch, int64_t max_seq,
                       size_t kv_dtype_bytes, WeightOf&& weight_of) {
  if (batch < 1 || max_seq < 1) throw Error("plan: batch and max_seq must be positive", "pass --batch B --max-seq S with B, S >= 1");
  MemoryPlan p;
  p.tp_size = layout.tp_size;
  p.pp_size = layout.pp_size;
  p.batch = batch;
  p.max_seq = max_seq;
  const uint64_t e = dtype_size(dtype);
  const uint64_t kv_e = kv_dtype_bytes ? kv_dtype_bytes : e;
  const uint64_t B = static_cast<uint64_t>(batch);
  const int64_t R = decode_bucket(static_cast<int>(std::min<int64_t>(batch, 1 << 30)));
  const int64_t T = step_tokens(batch, max_seq, R);
  p.workspace_bytes = kWorkspaceBytes;
  for (int stage = 0; stage < layout.pp_size; ++stage)
    for (int r = 0; r < layout.tp_size; ++r) {
      const TpRankRanges& L = layout.tp(r);
      RankMemory q;
      q.tp_rank = r;
      q.pp_stage = stage;
      q.weight_bytes = weight_of(stage, r);
      const Range layers = layout.stage_layers[static_cast<size_t>(stage)];
      const uint64_t positions = static_cast<uint64_t>(kv_cache_layer_positions(c, layers.begin, layers.end, max_seq));
      q.kv_cache_bytes = 2 * (B + 1) * positions * static_cast<uint64_t>(L.kv_heads.size()) *
                         static_cast<uint64_t>(c.head_dim) * kv_e;
      q.activation_bytes = plan_activations(c, L, layout.tp_size, e, T, R).total();
      q.total_bytes = q.weight_bytes + q.kv_cache_bytes + q.activation_bytes + p.workspace_bytes;
      p.weight_bytes = std::max(p.weight_bytes, q.weight_bytes);
      p.kv_cache_bytes = std::max(p.kv_cache_bytes, q.kv_cache_bytes);
      p.activation_bytes = std::max(p.activation_bytes, q.activation_bytes);
      p.ranks.push_back(q);
      if (q.weight_bytes > p.ranks[static_cast<size_t>(p.heaviest_rank)].weight_bytes)
        p.heaviest_rank = static_cast<int>(p.ranks.size()) - 1;
    }
  return p;
}

}  // namespace

uint64_t planned_weight_bytes(const ModelConfig& c, const ParallelLayout& layout, int pp_stage, int tp_rank, DType dtype) {
  uint64_t arena = 0;
  for (const OutputTensor& t : plan_tensors(c)) {
    if (!stage_holds(t, c, layout, pp_stage)) continue;
    uint64_t n = dtype_size(dtype);
    for (int64_t d : slice_for_rank(t, c, layout, tp_rank).local_shape) n *= static_cast<uint64_t>(d);
    arena = layout::align_up(arena, kDataAlignment) + n;
  }
  return layout::align_up(arena, kDataAlignment);
}

MemoryPlan plan_memory_for_config(const ModelConfig& c, DType dtype, int tp_size, int pp_size, int64_t batch,
                                  int64_t max_seq, size_t kv_dtype_bytes) {
  const ParallelLayout layout = make_parallel_layout(c, tp_size, pp_size);
  return plan_layout(c, layout, dtype, batch, max_seq, kv_dtype_bytes,
                     [&](int stage, int r) { return planned_weight_bytes(c, layout, stage, r, dtype); });
}

int64_t largest_batch_that_fits(const std::function<MemoryPlan(int64_t batch)>& plan, uint64_t capacity_bytes) {
  if (plan(1).total_bytes() > capacity_bytes) return 0;
  int64_t lo = 1, hi = 2;
  while (hi <= (int64_t{1} << 20) && plan(hi).total_bytes() <= capacity_bytes) lo = hi, hi *= 2;
  if (hi > (int64_t{1} << 20)) return lo;
  while (hi - lo > 1) {  // plan(lo) fits, plan(hi) does not
    const int64_t mid = lo + (hi - lo) / 2;
    if (plan(mid).total_bytes() <= capacity_bytes) lo = mid;
    else hi = mid;
  }
  return lo;
}

int64_t largest_max_seq_that_fits(const std::function<MemoryPlan(int64_t max_seq)>& plan, uint64_t capacity_bytes,
                                  int64_t limit) {
  if (limit < 1 || plan(1).total_bytes() > capacity_bytes) return 0;
  if (plan(limit).total_bytes() <= capacity_bytes) return limit;
  int64_t lo = 1, hi = limit;  // plan(lo) fits, plan(hi) does not
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (plan(mid).total_bytes() <= capacity_bytes) lo = mid;
    else hi = mid;
  }
  return lo;
}

MemoryPlan plan_memory(const Manifest& m, int tp_size, int64_t batch, int64_t max_seq, const std::string& model_dir,
                       size_t kv_dtype_bytes, int pp_size) {
  if (batch < 1 || max_seq < 1) throw Error("plan: batch and max_seq must be positive", "pass --batch B --max-seq S with B, S >= 1");
  const auto& shards = shards_for(m, tp_size, model_dir, pp_size);
  const ParallelLayout layout = make_parallel_layout(m.model, tp_size, pp_size);
  return plan_layout(m.model, layout, m.dtype, batch, max_seq, kv_dtype_bytes, [&](int stage, int r) {
    return shards[static_cast<size_t>(stage) * static_cast<size_t>(tp_size) + static_cast<size_t>(r)].weight_bytes;
  });
}

}  // namespace tpshard
