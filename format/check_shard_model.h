// check_shard_model.h: whether a shard file holds exactly the tensors tpshard convert writes for a
// manifest's "model" section at its (tp_size, tp_rank). Used by tpshard verify and by both backends'
// loaders, so that a model section edited after conversion (its model_section_xxh3 line removed, which
// load_manifest then cannot notice) is refused instead of running a different model silently.
#pragma once
#include "format/manifest.h"
#include "format/shard_file.h"

namespace tpshard {

/// Throws Error naming the shard file when its tensors are not exactly those of plan_tensors(m.model)
/// (format/convert/tensor_plan.h) with the local shapes of (tp_size, tp_rank), each in m.dtype: a missing
/// or extra tensor (an edited num_hidden_layers), another shape (an edited hidden or vocab size).
void check_tensors_match_model(const ShardReader& r, const Manifest& m, int tp_size, int tp_rank);

}  // namespace tpshard
