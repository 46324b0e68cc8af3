// phi3.cpp: Phi3ForCausalLM (Phi-3 / Phi-3.5 mini and medium). The Llama block (llama_family.h) with
// two fused projections: self_attn.qkv_proj [q heads | k heads | v heads] (Transform::PackedQkv) and
// mlp.gate_up_proj [gate | up] (Transform::PackedGateUp); no biases; a sliding_window on every layer when
// config.sliding_window is set (Phi-3-mini-4k: 2047), as transformers' Phi3Model builds one
// sliding-window causal mask for all layers. rope_scaling "longrope" (the 128k variants) is refused by
// the common rope parsing.
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
  const int64_t H = c.hidden_size, I = c.intermediate_size, V = c.vocab_size, hd = c.head_dim;
  const int64_t q_rows = c.num_attention_heads * hd, qkv_rows = (c.num_attention_heads + 2 * c.num_key_value_heads) * hd;
  using R = TensorRole;
  using T = Transform;
  std::vector<OutputTensor> v;
  add_tensor(v, R::TokenEmbd, -1, {"model.embed_tokens.weight"}, {{V, H}}, T::VocabRows);
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    const std::string a = p + "self_attn.", m = p + "mlp.";
    add_tensor(v, R::AttnNormWeight, l, {p + "input_layernorm.weight"}, {{H}}, T::Replicate);
    add_tensor(v, R::AttnQkvWeight, l, {a + "qkv_proj.weight"}, {{qkv_rows, H}}, T::PackedQkv);
    add_tensor(v, R::AttnOutputWeight, l, {a + "o_proj.weight"}, {{H, q_rows}}, T::ColsSplit);
    add_tensor(v, R::FfnNormWeight, l, {p + "post_attention_layernorm.weight"}, {{H}}, T::Replicate);
    add_tensor(v, R::FfnGateUpWeight, l, {m + "gate_up_proj.weight"}, {{2 * I, H}}, T::PackedGateUp);
    add_tensor(v, R::FfnDownWeight, l, {m + "down_proj.weight"}, {{H, I}}, T::ColsSplit);
  }
  add_tensor(v, R::OutputNormWeight, -1, {"model.norm.weight"}, {{H}}, T::Replicate);
  if (!c.tie_word_embeddings) add_tensor(v, R::Output, -1, {"lm_head.weight"}, {{V, H}}, T::VocabRows);
  return v;
}

}  // namespace

const ArchSpec kPhi3Arch{Arch::Phi3, "Phi3ForCausalLM", "llama", parse, plan, llama_family::no_ignorable};

}  // namespace tpshard
