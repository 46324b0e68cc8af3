// internlm2.cpp: InternLM2ForCausalLM (InternLM2 / InternLM2.5 1.8B, 7B, 20B; trust_remote_code layout,
// modeling_internlm2.py). The Llama block (RMSNorm, full rotary, gated silu MLP) with its own names: one
// wqkv packed per KV group (Transform::GroupedQkv), wo, feed_forward.w1 (gate) / w3 (up) / w2 (down),
// attention_norm / ffn_norm, tok_embeddings and output. `bias` puts a bias on wqkv and wo (not the MLP).
#include "model/arch/llama_family.h"
#include "model/arch/registry.h"
#include "model/config_fields.h"

namespace tpshard {

namespace {

using namespace config_fields;

/// InternLM2Config defaults: rms_norm_eps 1e-6, hidden_act silu, rope_theta 10000, bias true (the
/// published configs say false), rope_scaling null / linear / dynamic (parsed with the common fields).
double parse(const nlohmann::json& j, ModelConfig& c, const std::string& path) {
  const double partial = llama_family::parse_common(j, c, path);
  c.attention_bias = opt_bool(j, "bias", true, path);
  c.attention_out_bias = c.attention_bias;
  c.mlp_bias = false;
  return partial;
}

std::vector<OutputTensor> plan(const ModelConfig& c) {
  const int64_t H = c.hidden_size, I = c.intermediate_size, V = c.vocab_size, hd = c.head_dim;
  const int64_t q_rows = c.num_attention_heads * hd, qkv_rows = (c.num_attention_heads + 2 * c.num_key_value_heads) * hd;
  using R = TensorRole;
  using T = Transform;
  std::vector<OutputTensor> v;
  add_tensor(v, R::TokenEmbd, -1, {"model.tok_embeddings.weight"}, {{V, H}}, T::VocabRows);
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    const std::string a = p + "attention.", m = p + "feed_forward.";
    add_tensor(v, R::AttnNormWeight, l, {p + "attention_norm.weight"}, {{H}}, T::Replicate);
    add_tensor(v, R::AttnQkvWeight, l, {a + "wqkv.weight"}, {{qkv_rows, H}}, T::GroupedQkv);
    if (c.attention_bias) add_tensor(v, R::AttnQkvBias, l, {a + "wqkv.bias"}, {{qkv_rows}}, T::GroupedQkv);
    add_tensor(v, R::AttnOutputWeight, l, {a + "wo.weight"}, {{H, q_rows}}, T::ColsSplit);
    if (c.attention_out_bias) add_tensor(v, R::AttnOutputBias, l, {a + "wo.bias"}, {{H}}, T::Replicate);
    add_tensor(v, R::FfnNormWeight, l, {p + "ffn_norm.weight"}, {{H}}, T::Replicate);
    add_tensor(v, R::FfnGateUpWeight, l, {m + "w1.weight", m + "w3.weight"}, {{I, H}, {I, H}}, T::GateUp);
    add_tensor(v, R::FfnDownWeight, l, {m + "w2.weight"}, {{H, I}}, T::ColsSplit);
  }
  add_tensor(v, R::OutputNormWeight, -1, {"model.norm.weight"}, {{H}}, T::Replicate);
  if (!c.tie_word_embeddings) add_tensor(v, R::Output, -1, {"output.weight"}, {{V, H}}, T::VocabRows);
  return v;
}

}  // namespace

const ArchSpec kInternLM2Arch{Arch::InternLM2, "InternLM2ForCausalLM", "llama", parse, plan, llama_family::no_ignorable};

}  // namespace tpshard
