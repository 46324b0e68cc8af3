// qwen3.cpp: Qwen3ForCausalLM (Qwen3 dense models). The Llama block (llama_family.h) with an RMSNorm of
// each query and key head over head_dim (q_norm / k_norm, before rotary: modeling_qwen3.py
// Qwen3Attention), head_dim given apart from hidden_size / num_attention_heads, attention_bias on q/k/v/o
// as LlamaConfig (default false), no MLP bias, sliding windows as Qwen2.
#include "model/arch/llama_family.h"
#include "model/arch/registry.h"
#include "model/config_fields.h"

namespace tpshard {

namespace {

using namespace config_fields;

double parse(const nlohmann::json& j, ModelConfig& c, const std::string& path) {
  const double partial = llama_family::parse_common(j, c, path);
  c.attention_bias = opt_bool(j, "attention_bias", false, path);
  c.attention_out_bias = c.attention_bias;
  c.mlp_bias = false;
  c.qk_norm = true;
  llama_family::parse_qwen_sliding_window(j, c, path);
  return partial;
}

}  // namespace

const ArchSpec kQwen3Arch{Arch::Qwen3, "Qwen3ForCausalLM", "llama", parse, llama_family::plan, llama_family::no_ignorable};

}  // namespace tpshard
