// qwen2.cpp: Qwen2ForCausalLM (Qwen2, Qwen2.5). The Llama block (llama_family.h) with q/k/v biases
// always and none on o_proj or the MLP; sliding_window only when use_sliding_window is true.
#include "model/arch/llama_family.h"
#include "model/arch/registry.h"
#include "model/config_fields.h"

namespace tpshard {

namespace {

using namespace config_fields;

double parse(const nlohmann::json& j, ModelConfig& c, const std::string& path) {
  const double partial = llama_family::parse_common(j, c, path);
  c.attention_bias = true;  // Qwen2Attention: q/k/v bias always, o_proj without
  c.attention_out_bias = false;
  c.mlp_bias = false;
  if (opt_bool(j, "use_sliding_window", false, path)) c.sliding_window = opt_int(j, "sliding_window", 0, path);
  return partial;
}

}  // namespace

const ArchSpec kQwen2Arch{Arch::Qwen2, "Qwen2ForCausalLM", "llama", parse, llama_family::plan, llama_family::no_ignorable};

}  // namespace tpshard
