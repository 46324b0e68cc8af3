// cmd_plan.cpp: `tpshard plan`: prints plan_memory (model/memory_plan.h) for one tp size, and at tp > 1
// each rank's ranges and memory with the weight spread and the heaviest rank; with --gpu-mem, exit 1
// when the plan does not fit.
#include <algorithm>
#include <cstdint>
#include <cstdio>

#include "convert/progress.h"
#include "format/error.h"
#include "model/memory_plan.h"
#include "model/parallel_layout.h"
#include "tools/tpshard/commands.h"

namespace tpshard::cli {

int run_plan(const std::string& dir, int tp_size, int64_t batch, int64_t max_seq, double gpu_gib) {
  const Manifest m = load_manifest(dir);
  // the limits tprun applies (runtime/session_types.h effective_max_seq_len): plan only what can run
  const int64_t model_max = m.model.max_position_embeddings;
  TPS_CHECK(model_max <= 0 || max_seq <= model_max,
            "plan: --max-seq " + std::to_string(max_seq) + " exceeds the model's max_position_embeddings " +
                std::to_string(model_max),
            "pass --max-seq " + std::to_string(model_max) + " or less");
  const MemoryPlan p = plan_memory(m, tp_size, batch, max_seq, dir);
  std::printf("per-GPU memory plan: tp %d, batch %lld, max_seq %lld, dtype %s\n", tp_size, (long long)batch,
              (long long)max_seq, dtype_name(m.dtype));
  std::printf("  weights      %12s  (largest rank arena, manifest weight_bytes)\n", human_bytes(p.weight_bytes).c_str());
  std::printf("  kv_cache     %12s  (2 * layers * (batch + 1) * max_seq * kv_heads_per_rank * head_dim * dtype bytes)\n",
              human_bytes(p.kv_cache_bytes).c_str());
  std::printf("  activations  %12s  (the CUDA runner's step workspace: up to 1024 tokens, logits)\n", human_bytes(p.activation_bytes).c_str());
  std::printf("  workspace    %12s  (cuBLASLt, custom all_reduce, NCCL, allocator slack)\n", human_bytes(p.workspace_bytes).c_str());
  std::printf("  total        %12s\n", human_bytes(p.total_bytes()).c_str());
  if (tp_size > 1) {
    const ParallelLayout layout = make_parallel_layout(m.model, tp_size);
    uint64_t sum = 0, lo = UINT64_MAX;
    for (const RankMemory& r : p.ranks) sum += r.weight_bytes, lo = std::min(lo, r.weight_bytes);
    std::printf("\n  %-7s %-9s %-9s %-13s %12s %12s %12s %12s\n", "tp_rank", "heads", "kv_heads", "mlp_columns",
                "weights", "kv_cache", "activations", "total");
    for (const RankMemory& r : p.ranks) {
      const TpRankRanges& t = layout.tp(r.tp_rank);
      auto range = [](const Range& x) { return std::to_string(x.begin) + "-" + std::to_string(x.end - 1); };
      std::printf("  %-7d %-9s %-9s %-13s %12s %12s %12s %12s\n", r.tp_rank, range(t.heads).c_str(),
                  range(t.kv_heads).c_str(), range(t.mlp_columns).c_str(), human_bytes(r.weight_bytes).c_str(),
                  human_bytes(r.kv_cache_bytes).c_str(), human_bytes(r.activation_bytes).c_str(),
                  human_bytes(r.total_bytes).c_str());
    }
    const double even = static_cast<double>(sum) / tp_size;
    const uint64_t hi = p.ranks[static_cast<size_t>(p.heaviest_rank)].weight_bytes;
    std::printf("  weight spread: heaviest tp_rank %d (the slowest decode step) holds %s, %+.2f%% over total/tp %s; "
                "lightest %s\n",
                p.heaviest_rank, human_bytes(hi).c_str(), 100.0 * (static_cast<double>(hi) - even) / even,
                human_bytes(static_cast<uint64_t>(even)).c_str(), human_bytes(lo).c_str());
  }
  if (gpu_gib > 0) {
    const double cap = gpu_gib * 1073741824.0;
    const bool fits = static_cast<double>(p.total_bytes()) <= cap;
    std::printf("  %s in %.1f GiB (%.1f%%)\n", fits ? "fits" : "DOES NOT FIT", gpu_gib, 100.0 * p.total_bytes() / cap);
    if (!fits)
      throw Error("plan: " + human_bytes(p.total_bytes()) + " per GPU does not fit in " + std::to_string(gpu_gib) + " GiB",
                  "use a larger tp size, a smaller --batch or --max-seq");
  }
  return 0;
}

}  // namespace tpshard::cli
