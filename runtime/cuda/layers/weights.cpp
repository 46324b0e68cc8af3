// weights.cpp: bind the WeightArena's tensors to the typed view of weights.h.
#include "runtime/cuda/layers/weights.h"

#include "format/error.h"

namespace tpshard::cuda {

ModelWeights bind_weights(const WeightArena& arena, const ModelConfig& c, const ParallelLayout& layout, int pp_stage) {
  ModelWeights w;
  bool first = true;
  std::vector<OutputTensor> plan;
  for (OutputTensor& t : plan_tensors(c))
    if (stage_holds(t, c, layout, pp_stage)) plan.push_back(std::move(t));
  static_cast<ModelTensors<const void*>&>(w) =
      bind_model_tensors<const void*>(c, plan, [&](const OutputTensor& t) {
        const void* p = arena.at(t.name);  // throws Error naming the tensor and the shard file
        const TensorRecord& r = arena.record(t.name);
        if (first) {
          w.dtype = r.dtype;
          first = false;
        } else if (r.dtype != w.dtype) {
          throw Error("cuda weights: tensor " + t.name + " is " + dtype_name(r.dtype) + " but the other weights are " +
                          dtype_name(w.dtype),
                      "the CUDA backend needs one dtype for all weights; convert with --dtype f16, bf16 or f32");
        }
        return p;
      });
  if (c.tie_word_embeddings) w.output = w.token_embd;
  return w;
}

}  // namespace tpshard::cuda
