// cpu_weights.cpp: load a rank's shard into f32 vectors, one per planned tensor.
#include "runtime/cpu/cpu_weights.h"

namespace tpshard::cpu {

ModelWeights load_weights(const ShardReader& shard, const ModelConfig& c, bool verify, const ParallelLayout& layout,
                          int pp_stage, Progress* progress) {
  ModelWeights w;
  uint64_t bytes = 0;
  std::vector<OutputTensor> plan;
  for (OutputTensor& t : plan_tensors(c))
    if (stage_holds(t, c, layout, pp_stage)) plan.push_back(std::move(t));
  static_cast<ModelTensors<std::vector<float>>&>(w) =
      bind_model_tensors<std::vector<float>>(c, plan, [&](const OutputTensor& t) {
        std::vector<float> v = shard.read_tensor_f32(t.name, verify);
        bytes += v.size() * sizeof(float);
        if (progress != nullptr) progress->add(shard.at(t.name).raw_bytes);
        return v;
      });
  w.bytes = bytes;
  return w;
}

}  // namespace tpshard::cpu
