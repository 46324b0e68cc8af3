// weights.h: one rank's weights as device-pointer views into the WeightArena, bound to the typed view
// of the tensor plan (model/model_tensors.h), so the forward pass never looks a tensor up by name.
// Shapes were checked against the plan when the shard was opened (model/rank_shard.h).
#pragma once
#include <vector>

#include "format/dtype.h"
#include "model/model_config.h"
#include "model/model_tensors.h"
#include "model/parallel_layout.h"
#include "runtime/cuda/weight_arena.h"

namespace tpshard::cuda {

using LayerWeights = LayerTensors<const void*>;

/// Every tensor of the rank (nullptr = absent); output == token_embd when tied.
struct ModelWeights : ModelTensors<const void*> {
  DType dtype = DType::F16;  ///< every tensor has this dtype
};

/// Resolve every planned tensor that pp_stage of layout holds (stage_holds, model/tensor_plan.h; all of
/// them with one stage) in the arena; the other layers' slots stay nullptr. Throws Error naming the
/// tensor when one is missing or its dtype differs from the others (the CUDA backend runs one dtype;
/// hint: convert with --dtype).
ModelWeights bind_weights(const WeightArena& arena, const ModelConfig& c, const ParallelLayout& layout, int pp_stage);

}  // namespace tpshard::cuda
