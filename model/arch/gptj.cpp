// gptj.cpp: GPTJForCausalLM (GPT-J-6B and its fine-tunes). transformers' modeling_gptj.py: one LayerNorm
// (ln_1) feeding attention and the MLP in parallel (x + attn(ln_1 x) + mlp(ln_1 x)), q/k/v/out_proj
// without bias, rotary on the first rotary_dim dims of each head in GPT-J's interleaved pairs
// (reordered to the half-split layout at conversion: Transform::GptjQkv), fc_in / fc_out with bias and
// gelu_new, ln_f, and an lm_head with a bias.
#include "model/arch/registry.h"
#include "model/config_fields.h"

namespace tpshard {

namespace {

using namespace config_fields;

/// GPTJConfig defaults: n_inner null (4 * n_embd), rotary_dim 64 (null: the whole head), activation_function
/// gelu_new, layer_norm_epsilon 1e-5, tie_word_embeddings false; n_embd / n_layer / n_head / n_positions
/// are read as the standard names (model_config.cpp). A tpshard manifest carries intermediate_size,
/// hidden_act, layer_norm_eps and partial_rotary_factor instead.
double parse(const nlohmann::json& j, ModelConfig& c, const std::string& path) {
  const bool manifest = !has(j, "n_embd") && has(j, "partial_rotary_factor");
  c.intermediate_size = has(j, "n_inner") && !j["n_inner"].is_null() ? opt_int(j, "n_inner", 0, path)
                                                                      : opt_int(j, "intermediate_size", 4 * c.hidden_size, path);
  c.norm = NormKind::LayerNorm;
  c.norm_eps = has(j, "layer_norm_epsilon") ? opt_num(j, "layer_norm_epsilon", 1e-5, path)
                                            : opt_num(j, "layer_norm_eps", 1e-5, path);
  c.hidden_act = has(j, "activation_function") ? opt_act(j, "activation_function", "gelu_new", path)
                                               : opt_act(j, "hidden_act", "gelu_new", path);
  c.gated_mlp = false;
  c.use_parallel_residual = true;  // both branches read ln_1: the plan gives ffn_norm the same tensor
  c.rope_theta = opt_num(j, "rope_theta", 10000.0, path);
  c.attention_bias = false;
  c.attention_out_bias = false;
  c.mlp_bias = true;
  if (manifest) return opt_num(j, "partial_rotary_factor", 1.0, path);
  if (!has(j, "rotary_dim")) return 64.0 / static_cast<double>(c.head_dim);
  if (j["rotary_dim"].is_null()) return 1.0;
  return static_cast<double>(opt_int(j, "rotary_dim", 64, path)) / static_cast<double>(c.head_dim);
}

std::vector<OutputTensor> plan(const ModelConfig& c) {
  const int64_t H = c.hidden_size, I = c.intermediate_size, V = c.vocab_size;
  const int64_t q_rows = c.num_attention_heads * c.head_dim, kv_rows = c.num_key_value_heads * c.head_dim;
  using R = TensorRole;
  using T = Transform;
  std::vector<OutputTensor> v;
  add_tensor(v, R::TokenEmbd, -1, {"transformer.wte.weight"}, {{V, H}}, T::VocabRows);
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = "transformer.h." + std::to_string(l) + ".";
    add_tensor(v, R::AttnNormWeight, l, {p + "ln_1.weight"}, {{H}}, T::Replicate);
    add_tensor(v, R::AttnNormBias, l, {p + "ln_1.bias"}, {{H}}, T::Replicate);
    add_tensor(v, R::AttnQkvWeight, l, {p + "attn.q_proj.weight", p + "attn.k_proj.weight", p + "attn.v_proj.weight"},
               {{q_rows, H}, {kv_rows, H}, {kv_rows, H}}, T::GptjQkv);
    add_tensor(v, R::AttnOutputWeight, l, {p + "attn.out_proj.weight"}, {{H, q_rows}}, T::ColsSplit);
    add_tensor(v, R::FfnNormWeight, l, {p + "ln_1.weight"}, {{H}}, T::Replicate);
    add_tensor(v, R::FfnNormBias, l, {p + "ln_1.bias"}, {{H}}, T::Replicate);
    add_tensor(v, R::FfnUpWeight, l, {p + "mlp.fc_in.weight"}, {{I, H}}, T::RowsSplit);
    add_tensor(v, R::FfnUpBias, l, {p + "mlp.fc_in.bias"}, {{I}}, T::RowsSplit);
    add_tensor(v, R::FfnDownWeight, l, {p + "mlp.fc_out.weight"}, {{H, I}}, T::ColsSplit);
    add_tensor(v, R::FfnDownBias, l, {p + "mlp.fc_out.bias"}, {{H}}, T::Replicate);
  }
  add_tensor(v, R::OutputNormWeight, -1, {"transformer.ln_f.weight"}, {{H}}, T::Replicate);
  add_tensor(v, R::OutputNormBias, -1, {"transformer.ln_f.bias"}, {{H}}, T::Replicate);
  if (!c.tie_word_embeddings) add_tensor(v, R::Output, -1, {"lm_head.weight"}, {{V, H}}, T::VocabRows);
  add_tensor(v, R::OutputBias, -1, {"lm_head.bias"}, {{V}}, T::VocabRows);
  return v;
}

/// The causal-mask buffers older checkpoints saved with the weights (_keys_to_ignore_on_load_unexpected).
bool ignorable(const std::string& n) { return ends_with(n, ".attn.bias") || ends_with(n, ".attn.masked_bias"); }

}  // namespace

const ArchSpec kGptJArch{Arch::GptJ, "GPTJForCausalLM", "gptj", parse, plan, ignorable};

}  // namespace tpshard
