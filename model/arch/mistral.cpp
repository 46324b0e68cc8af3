// mistral.cpp: MistralForCausalLM. The Llama block (llama_family.h) with a sliding_window (Mistral v0.1:
// 4096; null or absent in later versions) on every layer: transformers' MistralModel builds one
// sliding-window causal mask for all layers whenever config.sliding_window is set (layer_types is
// ignored by MistralConfig).
#include "model/arch/llama_family.h"
#include "model/arch/registry.h"
#include "model/config_fields.h"

namespace tpshard {

namespace {

using namespace config_fields;

double parse(const nlohmann::json& j, ModelConfig& c, const std::string& path) {
  const double partial = llama_family::parse_common(j, c, path);
  llama_family::parse_llama_biases(j, c, path);
  llama_family::set_sliding_window(c, opt_int(j, "sliding_window", 0, path),
                                   std::vector<bool>(static_cast<size_t>(c.num_hidden_layers), true));
  return partial;
}

}  // namespace

const ArchSpec kMistralArch{Arch::Mistral, "MistralForCausalLM", "llama", parse, llama_family::plan,
                            llama_family::no_ignorable};

}  // namespace tpshard
