// gpt_neox.cpp: GPTNeoXForCausalLM (Pythia, GPT-NeoX-20B, RedPajama-INCITE). LayerNorm with bias,
// partial rotary (rotary_pct), parallel residual, non-gated gelu MLP, query_key_value packed per head.
#include "model/arch/registry.h"
#include "model/config_fields.h"

namespace tpshard {

namespace {

using namespace config_fields;
using Shape = std::vector<int64_t>;

/// transformers GPTNeoXConfig defaults: intermediate 4*hidden, rotary_pct 0.25, base 10000,
/// use_parallel_residual true, layer_norm_eps 1e-5, hidden_act gelu, attention_bias true.
double parse(const nlohmann::json& j, ModelConfig& c, const std::string& path) {
  c.intermediate_size = opt_int(j, "intermediate_size", 4 * c.hidden_size, path);
  c.norm = NormKind::LayerNorm;
  c.norm_eps = opt_num(j, "layer_norm_eps", 1e-5, path);
  c.hidden_act = opt_act(j, "hidden_act", "gelu", path);
  c.gated_mlp = false;
  c.use_parallel_residual = opt_bool(j, "use_parallel_residual", true, path);
  c.rope_theta = has(j, "rotary_emb_base") ? opt_num(j, "rotary_emb_base", 10000.0, path)
                                           : opt_num(j, "rope_theta", 10000.0, path);
  c.attention_bias = opt_bool(j, "attention_bias", true, path);
  c.attention_out_bias = c.attention_bias;
  c.mlp_bias = true;
  return has(j, "rotary_pct") ? opt_num(j, "rotary_pct", 0.25, path) : opt_num(j, "partial_rotary_factor", 0.25, path);
}

std::vector<OutputTensor> plan(const ModelConfig& c) {
  const int64_t H = c.hidden_size, I = c.intermediate_size, V = c.vocab_size;
  const int64_t q_rows = c.num_attention_heads * c.head_dim;
  using R = TensorRole;
  using T = Transform;
  std::vector<OutputTensor> v;
  add_tensor(v, R::TokenEmbd, -1, {"gpt_neox.embed_in.weight"}, {{V, H}}, T::VocabRows);
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = "gpt_neox.layers." + std::to_string(l) + ".";
    add_tensor(v, R::AttnNormWeight, l, {p + "input_layernorm.weight"}, {{H}}, T::Replicate);
    add_tensor(v, R::AttnNormBias, l, {p + "input_layernorm.bias"}, {{H}}, T::Replicate);
    add_tensor(v, R::AttnQkvWeight, l, {p + "attention.query_key_value.weight"}, {{3 * q_rows, H}}, T::NeoxQkv);
    if (c.attention_bias)
      add_tensor(v, R::AttnQkvBias, l, {p + "attention.query_key_value.bias"}, {{3 * q_rows}}, T::NeoxQkv);
    add_tensor(v, R::AttnOutputWeight, l, {p + "attention.dense.weight"}, {{H, q_rows}}, T::ColsSplit);
    if (c.attention_out_bias) add_tensor(v, R::AttnOutputBias, l, {p + "attention.dense.bias"}, {{H}}, T::Replicate);
    add_tensor(v, R::FfnNormWeight, l, {p + "post_attention_layernorm.weight"}, {{H}}, T::Replicate);
    add_tensor(v, R::FfnNormBias, l, {p + "post_attention_layernorm.bias"}, {{H}}, T::Replicate);
    add_tensor(v, R::FfnUpWeight, l, {p + "mlp.dense_h_to_4h.weight"}, {{I, H}}, T::RowsSplit);
    add_tensor(v, R::FfnUpBias, l, {p + "mlp.dense_h_to_4h.bias"}, {{I}}, T::RowsSplit);
    add_tensor(v, R::FfnDownWeight, l, {p + "mlp.dense_4h_to_h.weight"}, {{H, I}}, T::ColsSplit);
    add_tensor(v, R::FfnDownBias, l, {p + "mlp.dense_4h_to_h.bias"}, {{H}}, T::Replicate);
  }
  add_tensor(v, R::OutputNormWeight, -1, {"gpt_neox.final_layer_norm.weight"}, {{H}}, T::Replicate);
  add_tensor(v, R::OutputNormBias, -1, {"gpt_neox.final_layer_norm.bias"}, {{H}}, T::Replicate);
  if (!c.tie_word_embeddings) add_tensor(v, R::Output, -1, {"embed_out.weight"}, {{V, H}}, T::VocabRows);
  return v;
}

/// The causal-mask buffers older checkpoints saved with the weights.
bool ignorable(const std::string& n) { return ends_with(n, ".attention.bias") || ends_with(n, ".attention.masked_bias"); }

}  // namespace

const ArchSpec kGptNeoXArch{Arch::GptNeoX, "GPTNeoXForCausalLM", "gpt_neox", parse, plan, ignorable};

}  // namespace tpshard
