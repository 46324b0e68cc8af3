// rank_shard.cpp: see rank_shard.h.
#include "model/rank_shard.h"

#include <sys/stat.h>

#include <cerrno>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "format/error.h"
#include "model/model_config.h"
#include "model/parallel_layout.h"
#include "model/tensor_plan.h"

namespace tpshard {
namespace {

const char* kModelHint =
    "manifest.json's \"model\" section does not describe these shards (edited after conversion?): restore "
    "manifest.json from the conversion, or re-run tpshard convert";

std::string shape_text(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

}  // namespace

// A section edited after conversion with its model_section_xxh3 line removed (load_manifest cannot
// notice) would otherwise pass verify, and tprun would refuse it (a missing tensor) or run a smaller
// model silently; an edited "dtype" would make tpshard plan misjudge the kv_cache.
void check_tensors_match_model(const ShardReader& r, const Manifest& m, int tp_size, int tp_rank, int pp_size,
                               int pp_stage) {
  const std::string& path = r.path();
  const std::string section = "manifest.json's model section (num_hidden_layers " +
                              std::to_string(m.model.num_hidden_layers) + ", hidden_size " +
                              std::to_string(m.model.hidden_size) + ")";
  const ParallelLayout layout = make_parallel_layout(m.model, tp_size, pp_size);
  std::set<std::string> planned;
  for (const OutputTensor& t : plan_tensors(m.model)) {
    if (!stage_holds(t, m.model, layout, pp_stage)) continue;
    planned.insert(t.name);
    const TensorRecord* rec = r.find(t.name);
    if (!rec) throw Error(path + ": has no tensor " + t.name + ", which " + section + " calls for", kModelHint);
    const RankSlice want = slice_for_rank(t, m.model, layout, tp_rank);
    if (rec->local_shape == want.local_shape && (rec->global_shape != want.global_shape || rec->split_axis != want.split_axis))
      throw Error(path + ": tensor " + t.name + " records global shape " + shape_text(rec->global_shape) + " split on axis " +
                      std::to_string(rec->split_axis) + ", " + section + " gives " + shape_text(want.global_shape) +
                      " split on axis " + std::to_string(want.split_axis) + " at tp_size " + std::to_string(tp_size),
                  kModelHint);
    if (rec->local_shape != want.local_shape)
      throw Error(path + ": tensor " + t.name + " is " + shape_text(rec->local_shape) + ", " + section + " gives " +
                      shape_text(want.local_shape) + " at tp_rank " + std::to_string(tp_rank) + " of " +
                      std::to_string(tp_size),
                  kModelHint);
  }
  for (const TensorRecord& rec : r.tensors())
    if (!planned.count(rec.name))
      throw Error(path + ": holds tensor " + rec.name + ", which " + section + " does not call for", kModelHint);
  check_shard_dtype(r, m.dtype);
}

std::unique_ptr<ShardReader> open_rank_shard(const Manifest& m, const std::string& model_dir, int tp_size, int tp_rank,
                                             int pp_size, int pp_stage) {
  const std::vector<ManifestShard>& shards = shards_for(m, tp_size, model_dir, pp_size);
  TPS_CHECK(tp_rank >= 0 && tp_rank < tp_size && pp_stage >= 0 && pp_stage < pp_size,
            "tp_rank " + std::to_string(tp_rank) + " / pp_stage " + std::to_string(pp_stage) + " is outside tp_size " +
                std::to_string(tp_size) + " / pp_size " + std::to_string(pp_size) + " of " + model_dir,
            "start pp_size x tp_size ranks");
  check_manifest_ranges(m, tp_size, model_dir, pp_size);
  const ManifestShard& ms = shards[static_cast<size_t>(pp_stage) * static_cast<size_t>(tp_size) + static_cast<size_t>(tp_rank)];
  const std::string path = (std::filesystem::path(model_dir) / ms.file).string();
  struct stat st {};
  TPS_CHECK(::stat(path.c_str(), &st) == 0 || errno != ENOENT,
            path + ": shard of tp_rank " + std::to_string(tp_rank) + " (tp_size " + std::to_string(tp_size) + ") is missing",
            "re-run tpshard convert with --tp " + std::to_string(tp_size) +
                (pp_size > 1 ? " --pp " + std::to_string(pp_size) : std::string()) + " or restore the file");
  auto reader = std::make_unique<ShardReader>(path);  // names what else keeps it from being read
  TPS_CHECK(reader->file_bytes() == ms.bytes,
            path + ": size " + std::to_string(reader->file_bytes()) + " bytes differs from the manifest's " +
                std::to_string(ms.bytes),
            "the shard is truncated or from another conversion; run tpshard verify, then re-convert");
  TPS_CHECK(static_cast<int>(reader->header().tp_rank) == tp_rank && static_cast<int>(reader->header().tp_size) == tp_size,
            path + ": header says tp_rank " + std::to_string(reader->header().tp_rank) + " of " +
                std::to_string(reader->header().tp_size) + ", manifest says " + std::to_string(tp_rank) + " of " +
                std::to_string(tp_size),
            "the model directory is inconsistent; re-run tpshard convert");
  check_shard_belongs(*reader, ms, model_dir);
  check_shard_dtype(*reader, m.dtype);
  check_tensors_match_model(*reader, m, tp_size, tp_rank, pp_size, pp_stage);  // an edited model section
  return reader;
}

}  // namespace tpshard
