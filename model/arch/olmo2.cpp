// olmo2.cpp: Olmo2ForCausalLM (OLMo 2 1B / 7B / 13B / 32B). transformers' modeling_olmo2.py: per layer
// attention on the residual stream itself (no input norm) -> post_attention_layernorm -> residual add, MLP
// on the residual (no pre-feedforward norm) -> post_feedforward_layernorm -> residual add; q_norm / k_norm
// are RMSNorms over the whole q / k projection (num_heads * head_dim, not per head), before rotary;
// gated silu MLP, full rotary, no biases unless attention_bias, untied LM head.
#include "model/arch/llama_family.h"
#include "model/arch/registry.h"
#include "model/config_fields.h"

namespace tpshard {

namespace {

using namespace config_fields;

/// Olmo2Config defaults (configuration_olmo2.py): intermediate_size 11008, hidden_act silu, rms_norm_eps
/// 1e-5, rope_theta 10000 (the base default), attention_bias false (on q, k, v and o_proj),
/// tie_word_embeddings false; no sliding window.
double parse(const nlohmann::json& j, ModelConfig& c, const std::string& path) {
  c.intermediate_size = opt_int(j, "intermediate_size", 11008, path);
  c.norm = NormKind::RmsNorm;
  c.norm_eps = opt_num(j, "rms_norm_eps", 1e-5, path);
  c.hidden_act = opt_act(j, "hidden_act", "silu", path);
  c.gated_mlp = true;
  c.use_parallel_residual = false;
  c.rope_theta = opt_num(j, "rope_theta", 10000.0, path);
  c.attention_bias = c.attention_out_bias = opt_bool(j, "attention_bias", false, path);
  c.mlp_bias = false;
  c.pre_norms = false;
  c.post_norms = true;
  c.qk_norm_across_heads = true;
  return 1.0;
}

std::vector<OutputTensor> plan(const ModelConfig& c) {
  const int64_t H = c.hidden_size, I = c.intermediate_size, V = c.vocab_size, hd = c.head_dim;
  const int64_t q_rows = c.num_attention_heads * hd, kv_rows = c.num_key_value_heads * hd;
  using R = TensorRole;
  using T = Transform;
  std::vector<OutputTensor> v;
  add_tensor(v, R::TokenEmbd, -1, {"model.embed_tokens.weight"}, {{V, H}}, T::VocabRows);
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    const std::string a = p + "self_attn.", m = p + "mlp.";
    llama_family::add_qkv_projections(v, c, l, a);
    // Whole-projection norms, replicated (a rank reads its heads' part: qk_norm_across_heads)
    add_tensor(v, R::AttnQNormWeight, l, {a + "q_norm.weight"}, {{q_rows}}, T::Replicate);
    add_tensor(v, R::AttnKNormWeight, l, {a + "k_norm.weight"}, {{kv_rows}}, T::Replicate);
    llama_family::add_output_projection(v, c, l, a);
    add_tensor(v, R::AttnPostNormWeight, l, {p + "post_attention_layernorm.weight"}, {{H}}, T::Replicate);
    add_tensor(v, R::FfnGateUpWeight, l, {m + "gate_proj.weight", m + "up_proj.weight"}, {{I, H}, {I, H}}, T::GateUp);
    add_tensor(v, R::FfnDownWeight, l, {m + "down_proj.weight"}, {{H, I}}, T::ColsSplit);
    add_tensor(v, R::FfnPostNormWeight, l, {p + "post_feedforward_layernorm.weight"}, {{H}}, T::Replicate);
  }
  add_tensor(v, R::OutputNormWeight, -1, {"model.norm.weight"}, {{H}}, T::Replicate);
  if (!c.tie_word_embeddings) add_tensor(v, R::Output, -1, {"lm_head.weight"}, {{V, H}}, T::VocabRows);
  return v;
}

}  // namespace

const ArchSpec kOlmo2Arch{Arch::Olmo2, "Olmo2ForCausalLM", "olmo2", parse, plan, llama_family::no_ignorable};

}  // namespace tpshard
