// fuzz_config.cpp: config.json (parse_hf_config), then the parallel layout and the tensor plan of what
// it accepted at a few tp / pp sizes, and the manifest's model section round trip.
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "format/error.h"
#include "model/model_config.h"
#include "model/parallel_layout.h"
#include "model/tensor_plan.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const nlohmann::json j = nlohmann::json::parse(data, data + size, nullptr, false);
  if (j.is_discarded()) return 0;
  try {
    const tpshard::ModelConfig c = tpshard::parse_hf_config(j, "config.json");
    (void)tpshard::model_config_from_json(tpshard::model_config_to_json(c), "manifest.json");
    for (int tp : {1, 3}) {
      for (int pp : {1, 2}) {
        try {
          const tpshard::ParallelLayout l = tpshard::make_parallel_layout(c, tp, pp);
          for (const auto& t : tpshard::plan_tensors(c)) (void)tpshard::slice_for_rank(t, c, l, tp - 1);
        } catch (const tpshard::Error&) {
        }
      }
    }
  } catch (const tpshard::Error&) {
  }
  return 0;
}
