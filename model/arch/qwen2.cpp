// qwen2.cpp: Qwen2ForCausalLM (Qwen2, Qwen2.5). The Llama block (llama_family.h) with q/k/v biases
// always and none on o_proj or the MLP; sliding-window attention as llama_family::parse_qwen_sliding_window.
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

double parse(const json& j, ModelConfig& c, const std::string& path) {
  const double partial = llama_family::parse_common(j, c, path);
  c.attention_bias = true;  // Qwen2Attention: q/k/v bias always, o_proj without
  c.attention_out_bias = false;
  c.mlp_bias = false;
  llama_family::parse_qwen_sliding_window(j, c, path);
  return partial;
}

}  // namespace

const ArchSpec kQwen2Arch{Arch::Qwen2, "Qwen2ForCausalLM", "llama", parse, llama_family::plan, llama_family::no_ignorable};

}  // namespace tpshard
