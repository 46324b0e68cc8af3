// convert.h: `tpshard convert` as a library call: HF checkpoint -> OUT/{manifest.json, tpN/rankR.tps,
// tokenizer files, hf_config.json}. Several tp sizes in one pass over the source, bounded memory,
// atomic output (OUT.tmp-XXXXXX renamed to OUT at the end; removed on any failure).
// Does not own: the CLI (tools/tpshard), the file format (shard_file.h), the name table (tensor_plan.h).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model/manifest.h"
#include "format/shard_file.h"

namespace tpshard {

struct ConvertOptions {
  std::string hf_dir;              ///< config.json + model.safetensors or model.safetensors.index.json
  std::string out_dir;             ///< must not exist unless force
  std::vector<int> tp_sizes{1};    ///< every tp size to produce
  /// Every pp size to produce: each (pp, tp) pair is one layout (stage s, rank r: its layers' tensors).
  std::vector<int> pp_sizes{1};
  std::string dtype = "keep";      ///< keep | f16/fp16 | bf16 | f32/fp32
  Codec codec = Codec::None;       ///< None, Zstd or ZstdBytePlanes (applied to 2-D tensors)
  int zstd_level = 3;
  int threads = 0;                 ///< 0: min(hardware threads, 8)
  bool force = false;              ///< replace an existing OUT (only if it is a tpshard output or empty)
  bool allow_unused = false;       ///< unknown source tensors are listed, then skipped instead of an error
  bool allow_nonfinite = false;    ///< convert tensors holding NaN/inf instead of refusing the checkpoint
  bool progress = true;            ///< live progress line on stderr when it is a terminal
  bool hash_source = true;         ///< fingerprint the source files (XXH3 of each)
  /// Add the tp/pp layouts to the existing conversion in out_dir (`--add-tp`) instead of writing a new one:
  /// same checkpoint (file names, sizes, XXH3), config and dtype required; layouts it already holds are
  /// skipped; its source fingerprint, tokenizer files and other layouts stay as they are.
  bool add_layouts = false;
};

/// Per-shard statistics for the summary table.
struct ShardStats {
  int tp_size = 1, tp_rank = 0;
  int pp_size = 1, pp_stage = 0;
  std::string file;  ///< relative to OUT (shard_file_name)
  size_t tensors = 0;
  uint64_t file_bytes = 0, raw_bytes = 0, xxh3 = 0;
};

struct ConvertResult {
  Manifest manifest;
  std::vector<ShardStats> shards;
  std::vector<std::string> ignored;   ///< source tensors skipped (known buffers, tied lm_head, --allow-unused)
  size_t outside_language_model = 0;  ///< tensors of a multimodal checkpoint outside its language model, skipped
  std::string skipped_line;           ///< names their groups and why (model/multimodal.h); empty when none
  uint64_t source_bytes = 0;
  uint64_t output_bytes = 0;          ///< raw bytes streamed into shard files (all tp sizes, all passes)
  double seconds = 0;                 ///< the conversion phase (without source/shard hashing)
  double total_seconds = 0;           ///< everything
  /// add_layouts only: the requested layouts OUT already held ("tp 2", "pp 2 x tp 4"), not written again.
  std::vector<std::string> already_present;
};

/// Run the conversion. Throws Error (naming the file and the fix) on any problem; nothing is left at
/// OUT or OUT.tmp-* then. SIGINT/SIGTERM during the conversion also remove the temporary directory; a
/// SIGKILLed convert cannot, so each convert first removes the OUT.tmp-XXXXXX directories next to OUT
/// whose creating process is gone (temp_owner.h), and names every one it removes or keeps on stderr.
ConvertResult convert_checkpoint(const ConvertOptions& opt);

}  // namespace tpshard
