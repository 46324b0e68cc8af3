// falcon.cpp: FalconForCausalLM (Falcon-7B / 40B / 180B, Falcon2-11B; transformers' modeling_falcon.py with
// rotary positions). One query_key_value per layer packed per KV group: for each KV head its query heads,
// then its key head, then its value head (Transform::GroupedQkv). That one rule covers the three
// layouts transformers splits by flags: new_decoder_architecture (grouped KV), multi_query (one KV group:
// all query heads, then k, then v) and neither (one group per head: q, k, v per head). dense (attention
// output), mlp.dense_h_to_4h / dense_4h_to_h with gelu, LayerNorm with bias, bias on the linear layers
// only when `bias`. Residual: parallel (x + attn(n1 x) + mlp(n2 x)) with two norms (ln_attn / ln_mlp: the
// new decoder with num_ln_in_parallel_attn 2) or one shared norm (input_layernorm: Falcon-7B, Falcon2),
// or sequential (parallel_attn false: input_layernorm, then post_attention_layernorm). ALiBi models
// (Falcon-RW) are refused. Word embeddings tied to lm_head unless tie_word_embeddings is false.
#include "format/error.h"
#include "model/arch/registry.h"
#include "model/config_fields.h"

namespace tpshard {

namespace {

using namespace config_fields;

/// FalconConfig defaults: multi_query true, parallel_attn true, new_decoder_architecture false, bias false,
/// alibi false, num_kv_heads = num_attention_heads, ffn_hidden_size 4 x hidden, activation gelu,
/// layer_norm_epsilon 1e-5, tie_word_embeddings true, num_ln_in_parallel_attn null (2 with the new decoder),
/// max_position_embeddings 2048.
/// A tpshard manifest carries the normalized names instead (its "arch" key).
double parse(const nlohmann::json& j, ModelConfig& c, const std::string& path) {
  // FalconConfig's default: Falcon-7B's and Falcon-40B's config.json do not give max_position_embeddings
  if (c.max_position_embeddings == 0) c.max_position_embeddings = 2048;
  c.norm = NormKind::LayerNorm;
  c.gated_mlp = false;
  c.rope_theta = opt_num(j, "rope_theta", 10000.0, path);
  if (has(j, "arch")) {  // tpshard's manifest: model_config_to_json's names
    c.intermediate_size = opt_int(j, "intermediate_size", 4 * c.hidden_size, path);
    c.norm_eps = opt_num(j, "layer_norm_eps", 1e-5, path);
    c.hidden_act = opt_act(j, "hidden_act", "gelu", path);
    c.use_parallel_residual = opt_bool(j, "use_parallel_residual", true, path);
    c.shared_parallel_norm = opt_bool(j, "shared_parallel_norm", false, path);
    c.attention_bias = opt_bool(j, "attention_bias", false, path);
    c.attention_out_bias = opt_bool(j, "attention_out_bias", false, path);
    c.mlp_bias = opt_bool(j, "mlp_bias", false, path);
    c.tie_word_embeddings = opt_bool(j, "tie_word_embeddings", true, path);
    return 1.0;
  }
  if (opt_bool(j, "alibi", false, path))
    throw Error(path + ": \"alibi\": true (Falcon-RW's ALiBi positions) is not supported; tpshard runs the rotary "
                       "Falcon models (Falcon-7B, 40B, 180B, Falcon2)",
                "convert a rotary Falcon checkpoint");
  if (opt_bool(j, "apply_residual_connection_post_layernorm", false, path))
    throw Error(path + ": \"apply_residual_connection_post_layernorm\": true is not supported",
                "convert a checkpoint with the standard residual (every published Falcon has false)");
  const bool new_decoder = opt_bool(j, "new_decoder_architecture", false, path);
  const bool multi_query = opt_bool(j, "multi_query", true, path);
  const bool parallel_attn = opt_bool(j, "parallel_attn", true, path);
  const int64_t norms = has(j, "num_ln_in_parallel_attn") && !j["num_ln_in_parallel_attn"].is_null()
                            ? opt_int(j, "num_ln_in_parallel_attn", 2, path)
                            : (new_decoder ? 2 : 1);
  if (norms != 1 && norms != 2)
    throw Error(path + ": \"num_ln_in_parallel_attn\" must be 1 or 2, got " + std::to_string(norms), "fix config.json");
  if (new_decoder && norms == 1 && !parallel_attn)
    throw Error(path + ": new_decoder_architecture with num_ln_in_parallel_attn 1 needs parallel_attn true (transformers "
                       "cannot run it either)",
                "fix config.json");
  c.num_key_value_heads =
      new_decoder || !multi_query ? opt_int(j, "num_kv_heads", c.num_attention_heads, path) : 1;
  if (c.num_key_value_heads <= 0 || c.num_attention_heads % c.num_key_value_heads != 0)
    throw Error(path + ": num_attention_heads " + std::to_string(c.num_attention_heads) + " is not a multiple of num_kv_heads " +
                    std::to_string(c.num_key_value_heads),
                "fix config.json");
  c.intermediate_size = has(j, "ffn_hidden_size") && !j["ffn_hidden_size"].is_null()
                            ? opt_int(j, "ffn_hidden_size", 4 * c.hidden_size, path)
                            : 4 * c.hidden_size;
  c.norm_eps = opt_num(j, "layer_norm_epsilon", 1e-5, path);
  c.hidden_act = opt_act(j, "activation", "gelu", path);
  c.use_parallel_residual = new_decoder || parallel_attn;
  c.shared_parallel_norm = c.use_parallel_residual && !(new_decoder && norms == 2);
  const bool bias = opt_bool(j, "bias", false, path);
  c.attention_bias = bias;
  c.attention_out_bias = bias;
  c.mlp_bias = bias;
  c.tie_word_embeddings = opt_bool(j, "tie_word_embeddings", true, path);
  return 1.0;
}

std::vector<OutputTensor> plan(const ModelConfig& c) {
  const int64_t H = c.hidden_size, I = c.intermediate_size, V = c.vocab_size, hd = c.head_dim;
  const int64_t q_rows = c.num_attention_heads * hd, qkv_rows = (c.num_attention_heads + 2 * c.num_key_value_heads) * hd;
  using R = TensorRole;
  using T = Transform;
  std::vector<OutputTensor> v;
  add_tensor(v, R::TokenEmbd, -1, {"transformer.word_embeddings.weight"}, {{V, H}}, T::VocabRows);
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = "transformer.h." + std::to_string(l) + ".";
    // The norm of each branch: ln_attn / ln_mlp, one input_layernorm for both, or input / post-attention.
    const std::string attn_norm = c.use_parallel_residual && !c.shared_parallel_norm ? p + "ln_attn." : p + "input_layernorm.";
    const std::string ffn_norm = !c.use_parallel_residual ? p + "post_attention_layernorm."
                                 : c.shared_parallel_norm ? p + "input_layernorm."
                                                          : p + "ln_mlp.";
    add_tensor(v, R::AttnNormWeight, l, {attn_norm + "weight"}, {{H}}, T::Replicate);
    add_tensor(v, R::AttnNormBias, l, {attn_norm + "bias"}, {{H}}, T::Replicate);
    const std::string a = p + "self_attention.";
    add_tensor(v, R::AttnQkvWeight, l, {a + "query_key_value.weight"}, {{qkv_rows, H}}, T::GroupedQkv);
    if (c.attention_bias) add_tensor(v, R::AttnQkvBias, l, {a + "query_key_value.bias"}, {{qkv_rows}}, T::GroupedQkv);
    add_tensor(v, R::AttnOutputWeight, l, {a + "dense.weight"}, {{H, q_rows}}, T::ColsSplit);
    if (c.attention_out_bias) add_tensor(v, R::AttnOutputBias, l, {a + "dense.bias"}, {{H}}, T::Replicate);
    add_tensor(v, R::FfnNormWeight, l, {ffn_norm + "weight"}, {{H}}, T::Replicate);
    add_tensor(v, R::FfnNormBias, l, {ffn_norm + "bias"}, {{H}}, T::Replicate);
    add_tensor(v, R::FfnUpWeight, l, {p + "mlp.dense_h_to_4h.weight"}, {{I, H}}, T::RowsSplit);
    if (c.mlp_bias) add_tensor(v, R::FfnUpBias, l, {p + "mlp.dense_h_to_4h.bias"}, {{I}}, T::RowsSplit);
    add_tensor(v, R::FfnDownWeight, l, {p + "mlp.dense_4h_to_h.weight"}, {{H, I}}, T::ColsSplit);
    if (c.mlp_bias) add_tensor(v, R::FfnDownBias, l, {p + "mlp.dense_4h_to_h.bias"}, {{H}}, T::Replicate);
  }
  add_tensor(v, R::OutputNormWeight, -1, {"transformer.ln_f.weight"}, {{H}}, T::Replicate);
  add_tensor(v, R::OutputNormBias, -1, {"transformer.ln_f.bias"}, {{H}}, T::Replicate);
  if (!c.tie_word_embeddings) add_tensor(v, R::Output, -1, {"lm_head.weight"}, {{V, H}}, T::VocabRows);
  return v;
}

/// Nothing but weights is saved with Falcon checkpoints.
bool ignorable(const std::string&) { return false; }

}  // namespace

const ArchSpec kFalconArch{Arch::Falcon, "FalconForCausalLM", "falcon", parse, plan, ignorable};

}  // namespace tpshard
