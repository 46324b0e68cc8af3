// cmd_plan.cpp: `tpshard plan`: the per-GPU memory plan (model/memory_plan.h) of one layout, from a
// converted directory (its manifest's weight_bytes) or, before downloading weights or converting, from a
// Hugging Face directory or a bare config.json (weights from the tensor plan) at any tp x pp x dp (dp
// replicas each hold a whole tp x pp copy: the per-GPU plan does not change, the GPU count does). At tp
// or pp > 1, each rank's ranges and memory with the weight spread and the heaviest rank; with --gpu-mem,
// whether it fits and the largest batch (and max_seq) that would, exit 1 when the plan does not fit.
// With --gpu-mem, a missing --batch is the largest that fits at --max-seq; a missing --max-seq (with
// --batch) the largest that fits at --batch. --shared-prefix N plans a batch whose sequences share N prompt
// tokens as the runtime runs it: the prefix in one more fixed-size kv_cache slot.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>

#include "convert/hub_cache.h"
#include "common/progress.h"
#include "format/error.h"
#include "model/memory_plan.h"
#include "model/model_config.h"
#include "model/parallel_layout.h"
#include "tools/tpshard/commands.h"

namespace tpshard::cli {

namespace {

/// The stored dtype a checkpoint would be converted to without --dtype: its torch_dtype.
DType config_dtype(const ModelConfig& c, const std::string& dtype_opt) {
  if (!dtype_opt.empty() && dtype_opt != "keep") return dtype_from_string(dtype_opt);
  if (c.torch_dtype == "float32") return DType::F32;
  if (c.torch_dtype == "float16") return DType::F16;
  return DType::BF16;
}

/// --gpu-mem as written: "80", "139", "0.5" (no trailing zeros).
std::string gib_text(double gib) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", gib);
  return buf;
}

}  // namespace

int run_plan(const std::string& model_source, int tp_size, int pp_size, int dp_size, int64_t batch_opt, int64_t max_seq_opt,
             int64_t shared_prefix, double gpu_gib, const std::string& dtype_opt) {
  namespace fs = std::filesystem;
  const std::string dir = resolve_model_source(model_source);  // a repo id: its snapshot in the hub cache
  std::error_code ec;
  const bool converted = fs::exists(fs::path(dir) / "manifest.json", ec);
  const bool config_file = !converted && fs::is_regular_file(dir, ec);
  ModelConfig c;
  DType dtype = DType::BF16;
  std::string source;
  Manifest m;
  if (converted) {
    m = load_manifest(dir);
    c = m.model;
    dtype = m.dtype;
    TPS_CHECK(dtype_opt.empty() || dtype_opt == "keep", "plan --dtype: a converted model's dtype is fixed (" +
                                                            std::string(dtype_name(dtype)) + ")",
              "drop --dtype, or plan from the Hugging Face directory");
    source = "manifest weight_bytes";
  } else {
    const std::string hf_dir = config_file ? fs::path(dir).parent_path().string() : dir;
    TPS_CHECK(config_file || fs::exists(fs::path(dir) / "config.json", ec),
              dir + ": neither a converted model (manifest.json) nor a Hugging Face directory (config.json)",
              "point at a directory written by tpshard convert, a Hugging Face model directory, or its config.json");
    c = config_file ? load_hf_config_file(dir) : load_hf_config(hf_dir);
    dtype = config_dtype(c, dtype_opt);
    source = "from config.json's tensor plan, not converted";
  }
  // the limits tprun applies (runtime/session_types.h effective_max_seq_len): plan only what can run;
  // without --max-seq, tprun's default --max-seq-len, min(max_position_embeddings, 2048)
  const int64_t model_max = c.max_position_embeddings;
  int64_t batch = batch_opt;
  int64_t max_seq = max_seq_opt > 0 ? max_seq_opt : (model_max > 0 ? std::min<int64_t>(model_max, 2048) : 2048);
  TPS_CHECK(model_max <= 0 || max_seq <= model_max,
            "plan: --max-seq " + std::to_string(max_seq) + " exceeds the model's max_position_embeddings " +
                std::to_string(model_max),
            "pass --max-seq " + std::to_string(model_max) + " or less");
  TPS_CHECK(shared_prefix >= 0 && shared_prefix < max_seq,
            "plan: --shared-prefix " + std::to_string(shared_prefix) + " is not below --max-seq " + std::to_string(max_seq),
            "a shared prefix leaves each sequence at least one token of its own: pass --shared-prefix " +
                std::to_string(max_seq - 1) + " or less");
  auto plan_seq = [&](int64_t sequences, int64_t seq) {
    return converted ? plan_memory(m, tp_size, sequences, seq, dir, 0, pp_size)
                     : plan_memory_for_config(c, dtype, tp_size, pp_size, sequences, seq);
  };
  // The runtime (runtime/generate.h) holds a group's prefix in one more kv_cache slot, fixed-size like
  // the others: a batch of b sequences sharing a prefix runs in b + 1 slots (tprun --max-batch b + 1).
  const int64_t extra = shared_prefix > 0 ? 1 : 0;
  auto plan_at = [&](int64_t b, int64_t seq) { return plan_seq(b + extra, seq); };
  const double cap = gpu_gib * 1073741824.0;
  const std::string gib = gib_text(gpu_gib);
  // the inverse questions: the largest batch at max_seq, or the largest max_seq at batch, that fits in --gpu-mem
  std::string solved;
  if (batch_opt <= 0) {
    TPS_CHECK(gpu_gib > 0, "plan: --batch is needed without --gpu-mem",
              "pass --batch B, or --gpu-mem GIB for the largest batch that fits");
    const int64_t largest = largest_batch_that_fits([&](int64_t b) { return plan_at(b, max_seq); }, static_cast<uint64_t>(cap));
    TPS_CHECK(largest > 0, "plan: even batch 1 at max_seq " + std::to_string(max_seq) + " does not fit in " + gib + " GiB (" +
                               human_bytes(plan_at(1, max_seq).total_bytes()) + " per GPU)",
              "use a larger tp or pp size, or a smaller --max-seq");
    batch = largest;
    solved = "batch " + std::to_string(largest) + " is the largest that fits in " + gib + " GiB at max_seq " +
             std::to_string(max_seq);
  } else if (max_seq_opt <= 0 && gpu_gib > 0) {
    const int64_t limit = model_max > 0 ? model_max : (int64_t{1} << 20);
    const int64_t largest =
        largest_max_seq_that_fits([&](int64_t seq) { return plan_at(batch, seq); }, static_cast<uint64_t>(cap), limit);
    TPS_CHECK(largest > 0, "plan: batch " + std::to_string(batch) + " does not fit in " + gib + " GiB at any max_seq (" +
                               human_bytes(plan_at(batch, 1).total_bytes()) + " per GPU at max_seq 1)",
              "use a smaller --batch, or a larger tp or pp size");
    max_seq = largest;
    solved = "max_seq " + std::to_string(largest) + " is the largest that fits in " + gib + " GiB at batch " +
             std::to_string(batch) + (largest == model_max ? " (the model's max_position_embeddings)" : "");
  }
  const MemoryPlan p = plan_at(batch, max_seq);
  std::printf("per-GPU memory plan: tp %d%s%s, batch %lld, max_seq %lld, dtype %s\n", tp_size,
              pp_size > 1 ? (" x pp " + std::to_string(pp_size)).c_str() : "",
              dp_size > 1 ? (" x dp " + std::to_string(dp_size)).c_str() : "", (long long)batch, (long long)max_seq,
              dtype_name(dtype));
  if (!solved.empty()) std::printf("  %s\n", solved.c_str());
  if (shared_prefix > 0) {
    // What member slots holding only positions >= shared_prefix would need (not what the runtime does):
    // the prefix slot and the scratch slot at max_seq, each member at max_seq - shared_prefix.
    const uint64_t full_slot = plan_seq(1, max_seq).kv_cache_bytes / 2;
    const uint64_t short_slot = plan_seq(1, max_seq - shared_prefix).kv_cache_bytes / 2;
    const uint64_t offset_kv = 2 * full_slot + static_cast<uint64_t>(batch) * short_slot;
    std::printf("  shared prefix of %lld tokens: prefilled once per batch (%lld prompt tokens fewer), its kv_cache in one "
                "more slot of max_seq positions:\n  the plan counts batch + 1 sequences (run tprun with --max-batch %lld). "
                "Member slots holding only positions >= %lld\n  would need %s of kv_cache instead of %s (not implemented: "
                "kv_cache slots are fixed-size)\n",
                (long long)shared_prefix, (long long)((batch - 1) * shared_prefix), (long long)(batch + 1),
                (long long)shared_prefix, human_bytes(offset_kv).c_str(), human_bytes(p.kv_cache_bytes).c_str());
  }
  if (dp_size > 1)
    std::printf("  GPUs         %12d  (%d replicas of tp %d x pp %d; each replica takes its share of a batch job's items)\n",
                tp_size * pp_size * dp_size, dp_size, tp_size, pp_size);
  std::printf("  weights      %12s  (largest rank arena, %s)\n", human_bytes(p.weight_bytes).c_str(), source.c_str());
  std::printf("  kv_cache     %12s  (2 * stage layers * (batch + 1) * max_seq * kv_heads_per_rank * head_dim * dtype bytes)\n",
              human_bytes(p.kv_cache_bytes).c_str());
  std::printf("  activations  %12s  (the CUDA runner's step workspace: up to 1024 tokens, logits)\n", human_bytes(p.activation_bytes).c_str());
  std::printf("  workspace    %12s  (cuBLASLt, custom all_reduce, NCCL, allocator slack)\n", human_bytes(p.workspace_bytes).c_str());
  std::printf("  total        %12s\n", human_bytes(p.total_bytes()).c_str());
  if (p.ranks.size() > 1) {
    const ParallelLayout layout = make_parallel_layout(c, tp_size, pp_size);
    uint64_t sum = 0, lo = UINT64_MAX;
    for (const RankMemory& r : p.ranks) sum += r.weight_bytes, lo = std::min(lo, r.weight_bytes);
    std::printf("\n  %-8s %-7s %-9s %-9s %-13s %12s %12s %12s %12s\n", "pp_stage", "tp_rank", "heads", "kv_heads",
                "mlp_columns", "weights", "kv_cache", "activations", "total");
    for (const RankMemory& r : p.ranks) {
      const TpRankRanges& t = layout.tp(r.tp_rank);
      auto range = [](const Range& x) { return std::to_string(x.begin) + "-" + std::to_string(x.end - 1); };
      std::printf("  %-8d %-7d %-9s %-9s %-13s %12s %12s %12s %12s\n", r.pp_stage, r.tp_rank, range(t.heads).c_str(),
                  range(t.kv_heads).c_str(), range(t.mlp_columns).c_str(), human_bytes(r.weight_bytes).c_str(),
                  human_bytes(r.kv_cache_bytes).c_str(), human_bytes(r.activation_bytes).c_str(),
                  human_bytes(r.total_bytes).c_str());
    }
    const double even = static_cast<double>(sum) / static_cast<double>(p.ranks.size());
    const RankMemory& h = p.ranks[static_cast<size_t>(p.heaviest_rank)];
    std::printf("  weight spread: heaviest rank (pp_stage %d, tp_rank %d: the slowest decode step) holds %s, %+.2f%% over "
                "the mean %s; lightest %s\n",
                h.pp_stage, h.tp_rank, human_bytes(h.weight_bytes).c_str(),
                100.0 * (static_cast<double>(h.weight_bytes) - even) / even, human_bytes(static_cast<uint64_t>(even)).c_str(),
                human_bytes(lo).c_str());
  }
  if (gpu_gib > 0) {
    const bool fits = static_cast<double>(p.total_bytes()) <= cap;
    std::printf("  %s in %s GiB (%.1f%%)\n", fits ? "fits" : "DOES NOT FIT", gib.c_str(), 100.0 * p.total_bytes() / cap);
    const int64_t largest = largest_batch_that_fits([&](int64_t b) { return plan_at(b, max_seq); }, static_cast<uint64_t>(cap));
    std::printf("  largest batch that fits at max_seq %lld: %lld\n", (long long)max_seq, (long long)largest);
    const int64_t limit = model_max > 0 ? model_max : (int64_t{1} << 20);
    const int64_t longest =
        largest_max_seq_that_fits([&](int64_t seq) { return plan_at(batch, seq); }, static_cast<uint64_t>(cap), limit);
    std::printf("  largest max_seq that fits at batch %lld: %lld%s\n", (long long)batch, (long long)longest,
                longest == model_max ? " (the model's max_position_embeddings)" : "");
    if (!fits)
      throw Error("plan: " + human_bytes(p.total_bytes()) + " per GPU does not fit in " + gib + " GiB",
                  largest == 0 ? "use a larger tp or pp size, or a smaller --max-seq"
                  : longest == 0 ? "use --batch " + std::to_string(largest) + " or less, or a larger tp size"
                                 : "use --batch " + std::to_string(largest) + " or less, --max-seq " +
                                       std::to_string(longest) + " or less, or a larger tp size");
  }
  return 0;
}

}  // namespace tpshard::cli
