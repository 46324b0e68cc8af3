// manifest.h: manifest.json of a converted model directory (see docs/FORMAT.md, "Manifest").
// Owns: reading/writing manifest.json and locating a rank's shard file. Does not own: shard bytes.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "format/dtype.h"
#include "model/model_config.h"
#include "model/parallel_layout.h"

namespace tpshard {

class ShardReader;  // format/shard_file.h

constexpr int kFormatVersion = 1;

/// The tool version written into manifests and printed by --version ("0.1.0").
const char* tool_version();

/// One rank's shard file at one (pp_size, tp_size).
struct ManifestShard {
  int tp_rank = 0;
  std::string file;             ///< relative to the model directory, e.g. "tp2/rank1.tps"
  uint64_t bytes = 0;           ///< file size
  uint64_t xxh3 = 0;            ///< XXH3-64 of the whole file
  uint64_t weight_bytes = 0;    ///< device bytes needed for this rank's weights (arena size)
  /// XXH3-64 of the shard's tensor table (its header's table_xxh3): checked cheaply on every load
  /// (check_shard_belongs). Absent in manifests written before it was recorded.
  std::optional<uint64_t> table_xxh3;
  /// The rank's heads, KV heads, MLP columns and vocabulary rows (make_parallel_layout at conversion).
  /// Absent in manifests written before they were recorded (even splits only).
  std::optional<TpRankRanges> ranges;
  int pp_stage = 0;             ///< the pipeline stage (0 when pp_size is 1)
  /// The stage's layers (pipeline layouts only; absent at pp_size 1, where a shard holds every layer).
  std::optional<Range> layers;
};

struct SourceFile {
  std::string name;
  uint64_t bytes = 0;
  uint64_t xxh3 = 0;
};

struct Manifest {
  int format_version = kFormatVersion;
  std::string tool_version;
  std::vector<SourceFile> source;      ///< fingerprint of the Hugging Face checkpoint
  ModelConfig model;
  DType dtype = DType::F16;            ///< dtype of the stored weights
  std::map<int, std::vector<ManifestShard>> shards;  ///< tp_size -> shards ordered by tp_rank (pp_size 1)
  /// (pp_size > 1, tp_size) -> shards ordered by (pp_stage, tp_rank): stage s, rank r at s * tp_size + r.
  std::map<std::pair<int, int>, std::vector<ManifestShard>> pp_shards;
  std::vector<std::string> tokenizer_files;          ///< copied next to manifest.json
};

/// XXH3-64 of a canonical text of manifest.json's "model" section (compact, keys sorted, every number
/// by its value: 10000, 10000.0 and 1e4 are the same): recorded as "model_section_xxh3" by
/// save_manifest, so that load_manifest notices a value edited by hand, while re-indenting, reordering
/// keys or re-saving with another JSON tool (e.g. `jq .`) does not count.
uint64_t model_section_xxh3(const nlohmann::json& model);

/// Load MODEL_DIR/manifest.json. Throws Error naming the file for a missing/corrupt file, a
/// format_version this build does not read (hint: re-run tpshard convert with this version), or a
/// "model" section that no longer matches its recorded "model_section_xxh3" (edited after conversion).
Manifest load_manifest(const std::string& model_dir);
/// Write manifest.json into dir (atomically: temp file + rename).
void save_manifest(const Manifest& m, const std::string& dir);

/// Shards of the (pp_size, tp_size) layout (ordered by pp_stage, then tp_rank), or Error listing the
/// layouts that the manifest has and how to convert this one.
const std::vector<ManifestShard>& shards_for(const Manifest& m, int tp_size, const std::string& model_dir, int pp_size = 1);

/// The shard file of a rank, relative to the model directory: "tpT/rankR.tps" at pp_size 1,
/// "ppP-tpT/stageS-rankR.tps" otherwise.
std::string shard_file_name(int pp_size, int pp_stage, int tp_size, int tp_rank);

/// Every (pp_size, tp_size) layout the manifest holds, pp_size 1 first, as "tp T" / "pp P x tp T" text.
std::string manifest_layouts_text(const Manifest& m);

/// Throws Error when the ranges recorded for (pp_size, tp_size) overlap, leave a gap, do not cover the
/// model, or differ from make_parallel_layout(m.model, tp_size, pp_size) (a manifest edited or written by
/// another tool), naming the stage, the rank and the range; the same for each stage's layers. Entries
/// without ranges pass. Called by both loaders and by verify.
void check_manifest_ranges(const Manifest& m, int tp_size, const std::string& model_dir, int pp_size = 1);

/// The load-time tie between a shard and its manifest, called by both runtime backends right after a
/// rank opens its shard: throws Error when `shard` (opened from MODEL_DIR/entry.file) has another
/// table_xxh3 than the manifest entry records. The table holds every tensor's data hash, so a shard of
/// another conversion of the same architecture differs, and the check reads nothing beyond the header.
/// An entry without table_xxh3 (a manifest written before it was recorded) passes silently.
void check_shard_belongs(const ShardReader& shard, const ManifestShard& entry, const std::string& model_dir);

/// Throws Error naming the first tensor of `shard` that is not in `dtype`, manifest.json's "dtype"
/// (tpshard convert writes every tensor in it): a "dtype" edited after conversion, which would make
/// tpshard plan and the memory checks misjudge the kv_cache. Reads only the tensor table. Called by
/// both runtime backends after check_shard_belongs, and by tpshard verify and inspect.
void check_shard_dtype(const ShardReader& shard, DType dtype);

}  // namespace tpshard
