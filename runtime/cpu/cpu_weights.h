// cpu_weights.h: one tp_rank's weights for the CPU backend, read from its shard file and widened to f32,
// bound to the typed view of the tensor plan (model/model_tensors.h). Names and layouts:
// model/tensor_plan.h. Does not own: shape checks (open_rank_shard did them) or the maths.
#pragma once
#include <cstdint>
#include <vector>

#include "common/progress.h"
#include "format/shard_file.h"
#include "model/model_config.h"
#include "model/model_tensors.h"
#include "model/parallel_layout.h"

namespace tpshard::cpu {

using LayerWeights = LayerTensors<std::vector<float>>;

/// Every tensor of the rank as f32 vectors (empty = absent); output is empty when tied (use token_embd).
struct ModelWeights : ModelTensors<std::vector<float>> {
  uint64_t bytes = 0;  ///< f32 bytes held
};

/// Read and widen every tensor of the plan that pp_stage of `layout` holds from `shard` (opened and checked
/// by open_rank_shard); the other layers' slots stay empty. Throws Error naming the tensor and the file
/// when a tensor fails its hash check (verify). progress (may be null) gets the stored bytes of each tensor
/// read.
ModelWeights load_weights(const ShardReader& shard, const ModelConfig& c, bool verify, const ParallelLayout& layout,
                          int pp_stage, Progress* progress = nullptr);

}  // namespace tpshard::cpu
