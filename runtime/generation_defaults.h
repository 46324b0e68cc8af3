// generation_defaults.h: the sampling defaults of a model's generation_config.json, applied to the
// settings a user did not give. Convention: vLLM's `--generation-config auto` (the default there too):
// the fields temperature, top_k, top_p, min_p, repetition_penalty and max_new_tokens that the file
// holds become the defaults; do_sample is not consulted (vLLM does not either); `none` ignores the file
// (vLLM's `vllm`). Owns: reading and validating those fields. Does not own: the CLI, the request schema.
#pragma once
#include <optional>
#include <set>
#include <string>

#include "runtime/generate.h"

namespace tpshard {

/// The sampling fields of generation_config.json; absent ones are nullopt.
struct GenerationDefaults {
  std::optional<float> temperature, top_p, min_p, repetition_penalty;
  std::optional<int> top_k, max_new_tokens;
};

/// Reads MODEL_DIR/generation_config.json (tpshard convert copies it from the checkpoint). A missing file
/// gives no defaults. Throws Error naming the file and the field for invalid JSON or a value outside
/// its range (temperature >= 0, top_p in (0, 1], min_p in [0, 1], repetition_penalty > 0, top_k >= 0,
/// max_new_tokens >= 0); null values count as absent. A top_k above 2^31 - 1 is taken as "off" (0).
GenerationDefaults read_generation_defaults(const std::string& model_dir);

/// Sets each field of p that d holds and `given` (the option names the user set, e.g. "temperature",
/// "top_p", "max_new_tokens") does not. Returns what was applied as "temperature=0.6 top_p=0.9" (fields in
/// the order of GenerationDefaults), "" when nothing was.
std::string apply_generation_defaults(const GenerationDefaults& d, SamplingParams& p, const std::set<std::string>& given);

}  // namespace tpshard
