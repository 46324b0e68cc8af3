// phi3.cpp: Phi3ForCausalLM (Phi-3 / Phi-3.5 mini and medium). The Llama block (llama_family.h plan_block) with
// two fused projections: self_attn.qkv_proj [q heads | k heads | v heads] (Transform::PackedQkv) and
// mlp.gate_up_proj [gate | up] (Transform::PackedGateUp); no biases; a sliding_window on every layer when
// config.sliding_window is set (Phi-3-mini-4k: 2047), as transformers' Phi3Model builds one
// sliding-window causal mask for all layers. rope_scaling "longrope" (the 128k variants, Phi-3.5) is read by
// the common rope parsing (RopeType::LongRope: the short factors, sequences up to original_max_position_embeddings).
#include "model/arch/llama_family.h"
#include "model/arch/registry.h"
#include "model/config_fields.h"

namespace tpshard {

namespace {

using namespace config_fields;

/// Phi3Config defaults: rms_norm_eps 1e-5, hidden_act silu, rope_theta 10000, sliding_window null.
double parse(const nlohmann::json& j, ModelConfig& c, const std::string& path) {
  const double partial = llama_family::parse_common(j, c, path);
  c.norm_eps = opt_num(j, "rms_norm_eps", 1e-5, path);
  c.attention_bias = false;
  c.attention_out_bias = false;
  c.mlp_bias = false;
  llama_family::set_sliding_window(c, opt_int(j, "sliding_window", 0, path),
                                   std::vector<bool>(static_cast<size_t>(c.num_hidden_layers), true));
  return partial;
}

std::vector<OutputTensor> plan(const ModelConfig& c) {
  return llama_family::plan_block(c, llama_family::Projections::Fused);
}

}  // namespace

const ArchSpec kPhi3Arch{Arch::Phi3, "Phi3ForCausalLM", "llama", parse, plan, llama_family::no_ignorable};

}  // namespace tpshard
