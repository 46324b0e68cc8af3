// qwen2.cpp: Qwen2ForCausalLM (Qwen2, Qwen2.5). The Llama block (llama_family.h) with q/k/v biases
// always and none on o_proj or the MLP. Sliding-window attention as transformers 5 applies it
// (configuration_qwen2.py, modeling_qwen2.py): only when use_sliding_window is true (otherwise
// sliding_window is None), on the layers whose layer_types entry is "sliding_attention"; a config
// without layer_types gets "sliding_attention" for the layers l >= max_window_layers (default 28).
#include <string>
#include <vector>

#include "format/error.h"
#include "model/arch/llama_family.h"
#include "model/arch/registry.h"
#include "model/config_fields.h"

namespace tpshard {

namespace {

using namespace config_fields;
using nlohmann::json;

std::vector<bool> sliding_layers(const json& j, int64_t layers, const std::string& path) {
  std::vector<bool> out;
  if (!has(j, "layer_types")) {
    const int64_t first = opt_int(j, "max_window_layers", 28, path);
    for (int64_t l = 0; l < layers; ++l) out.push_back(l >= first);
    return out;
  }
  const json& t = j["layer_types"];
  const std::string hint = "layer_types must list \"full_attention\" or \"sliding_attention\" for each layer (fix config.json)";
  if (!t.is_array() || static_cast<int64_t>(t.size()) != layers)
    throw Error(path + ": layer_types is not a list of " + std::to_string(layers) + " entries", hint);
  for (const json& e : t) {
    const std::string name = e.is_string() ? e.get<std::string>() : e.dump();
    if (name != "full_attention" && name != "sliding_attention")
      throw Error(path + ": unknown layer type \"" + name + "\" in layer_types", hint);
    out.push_back(name == "sliding_attention");
  }
  return out;
}

double parse(const json& j, ModelConfig& c, const std::string& path) {
  const double partial = llama_family::parse_common(j, c, path);
  c.attention_bias = true;  // Qwen2Attention: q/k/v bias always, o_proj without
  c.attention_out_bias = false;
  c.mlp_bias = false;
  if (opt_bool(j, "use_sliding_window", false, path))
    llama_family::set_sliding_window(c, opt_int(j, "sliding_window", 0, path),
                                     sliding_layers(j, c.num_hidden_layers, path));
  return partial;
}

}  // namespace

const ArchSpec kQwen2Arch{Arch::Qwen2, "Qwen2ForCausalLM", "llama", parse, llama_family::plan, llama_family::no_ignorable};

}  // namespace tpshard
