// starcoder2.cpp: Starcoder2ForCausalLM (StarCoder2 3B / 7B / 15B). transformers' modeling_starcoder2.py:
// LayerNorm with bias (norm_epsilon), q/k/v/o projections and the non-gated MLP (c_fc -> gelu_pytorch_tanh
// -> c_proj) all with bias when use_bias, full rotary, GQA, sequential residual, one sliding window on
// every layer when sliding_window is set (create_sliding_window_causal_mask), tied embeddings.
#include "model/arch/llama_family.h"
#include "model/arch/registry.h"
#include "model/config_fields.h"

namespace tpshard {

namespace {

using namespace config_fields;

/// Starcoder2Config defaults: intermediate_size 12288, hidden_act gelu_pytorch_tanh, norm_epsilon 1e-5,
/// use_bias true, rope_theta 10000, sliding_window null, tie_word_embeddings true. A tpshard manifest
/// carries layer_norm_eps and attention_bias / mlp_bias (the same value) instead.
double parse(const nlohmann::json& j, ModelConfig& c, const std::string& path) {
  c.intermediate_size = opt_int(j, "intermediate_size", 12288, path);
  c.norm = NormKind::LayerNorm;
  c.norm_eps = has(j, "norm_epsilon") ? opt_num(j, "norm_epsilon", 1e-5, path) : opt_num(j, "layer_norm_eps", 1e-5, path);
  c.hidden_act = opt_act(j, "hidden_act", "gelu_pytorch_tanh", path);
  c.gated_mlp = false;
  c.use_parallel_residual = false;
  c.rope_theta = opt_num(j, "rope_theta", 10000.0, path);
  const bool bias = has(j, "use_bias") ? opt_bool(j, "use_bias", true, path) : opt_bool(j, "attention_bias", true, path);
  c.attention_bias = c.attention_out_bias = c.mlp_bias = bias;
  if (!has(j, "tie_word_embeddings")) c.tie_word_embeddings = true;
  llama_family::set_sliding_window(c, opt_int(j, "sliding_window", 0, path),
                                   std::vector<bool>(static_cast<size_t>(c.num_hidden_layers), true));
  return 1.0;
}

std::vector<OutputTensor> plan(const ModelConfig& c) {
  const int64_t H = c.hidden_size, I = c.intermediate_size, V = c.vocab_size;
  using R = TensorRole;
  using T = Transform;
  std::vector<OutputTensor> v;
  add_tensor(v, R::TokenEmbd, -1, {"model.embed_tokens.weight"}, {{V, H}}, T::VocabRows);
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    const std::string a = p + "self_attn.", m = p + "mlp.";
    add_tensor(v, R::AttnNormWeight, l, {p + "input_layernorm.weight"}, {{H}}, T::Replicate);
    add_tensor(v, R::AttnNormBias, l, {p + "input_layernorm.bias"}, {{H}}, T::Replicate);
    llama_family::add_qkv_projections(v, c, l, a);
    llama_family::add_output_projection(v, c, l, a);
    add_tensor(v, R::FfnNormWeight, l, {p + "post_attention_layernorm.weight"}, {{H}}, T::Replicate);
    add_tensor(v, R::FfnNormBias, l, {p + "post_attention_layernorm.bias"}, {{H}}, T::Replicate);
    add_tensor(v, R::FfnUpWeight, l, {m + "c_fc.weight"}, {{I, H}}, T::RowsSplit);
    if (c.mlp_bias) add_tensor(v, R::FfnUpBias, l, {m + "c_fc.bias"}, {{I}}, T::RowsSplit);
    add_tensor(v, R::FfnDownWeight, l, {m + "c_proj.weight"}, {{H, I}}, T::ColsSplit);
    if (c.mlp_bias) add_tensor(v, R::FfnDownBias, l, {m + "c_proj.bias"}, {{H}}, T::Replicate);
  }
  add_tensor(v, R::OutputNormWeight, -1, {"model.norm.weight"}, {{H}}, T::Replicate);
  add_tensor(v, R::OutputNormBias, -1, {"model.norm.bias"}, {{H}}, T::Replicate);
  if (!c.tie_word_embeddings) add_tensor(v, R::Output, -1, {"lm_head.weight"}, {{V, H}}, T::VocabRows);
  return v;
}

}  // namespace

const ArchSpec kStarcoder2Arch{Arch::Starcoder2, "Starcoder2ForCausalLM", "starcoder2", parse, plan,
                               llama_family::no_ignorable};

}  // namespace tpshard
