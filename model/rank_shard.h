// rank_shard.h: opening one rank's shard with every check a loader needs, in one call: the file of the
// manifest's (tp_size, tp_rank) exists and is a regular file, has the manifest's size, its header names
// that rank, its tensor table is this conversion's, its tensors are in the manifest's dtype and are
// exactly the tensor plan's at that rank (names and local shapes). Both backends and `tprun bench-load`
// open shards only through open_rank_shard; tpshard verify uses check_tensors_match_model.
#pragma once
#include <memory>
#include <string>

#include "format/shard_file.h"
#include "model/manifest.h"

namespace tpshard {

/// Throws Error naming the shard file when its tensors are not exactly those of plan_tensors(m.model)
/// (model/tensor_plan.h) with the local shapes of (tp_size, tp_rank), each in m.dtype: a missing
/// or extra tensor (an edited num_hidden_layers), another shape (an edited hidden or vocab size). A model
/// section edited after conversion with its model_section_xxh3 line removed is refused this way.
/// With pp_size > 1: only the tensors pp_stage holds (stage_holds, model/tensor_plan.h).
void check_tensors_match_model(const ShardReader& r, const Manifest& m, int tp_size, int tp_rank, int pp_size = 1,
                               int pp_stage = 0);

/// Open model_dir's shard of tp_rank at tp_size (the manifest's file) and run every check above. The
/// per-tensor hashes are checked later, while the tensors are read (ShardReader / the weight arena).
/// Throws Error naming the file and the fix: missing (re-run tpshard convert with --tp tp_size), another
/// size (truncated or from another conversion), another rank's header, another conversion's table,
/// another dtype, tensors that do not match the model.
/// With pp_size > 1, the shard of (pp_stage, tp_rank) of the (pp_size, tp_size) layout.
std::unique_ptr<ShardReader> open_rank_shard(const Manifest& m, const std::string& model_dir, int tp_size, int tp_rank,
                                             int pp_size = 1, int pp_stage = 0);

}  // namespace tpshard
