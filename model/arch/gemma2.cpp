// gemma2.cpp: Gemma2ForCausalLM (Gemma 2 2B / 9B / 27B). transformers' modeling_gemma2.py: token embeddings
// times sqrt(hidden_size) (Gemma2TextScaledWordEmbedding); per layer input_layernorm -> attention ->
// post_attention_layernorm -> residual add, pre_feedforward_layernorm -> GeGLU MLP (gelu_pytorch_tanh(gate)
// * up) -> post_feedforward_layernorm -> residual add; every RMSNorm x * (1 + weight) in f32
// (Gemma2RMSNorm); head_dim given apart from hidden / heads; scores scaled by query_pre_attn_scalar^-0.5
// and soft-capped (cap * tanh(s / cap), attn_logit_softcapping) before the mask; local (sliding_window)
// and global layers by layer_types; final norm, tied LM head, logits soft-capped (final_logit_softcapping).
#include <cmath>

#include "format/error.h"
#include "model/arch/llama_family.h"
#include "model/arch/registry.h"
#include "model/config_fields.h"

namespace tpshard {

namespace {

using namespace config_fields;
using nlohmann::json;

/// A soft-cap field: `def` when absent, 0 (no cap) when null, else a positive finite number. Throws
/// Error naming path and the key for 0, a negative or a non-finite value.
double softcap(const json& j, const char* key, double def, const std::string& path) {
  if (!j.contains(key)) return def;
  if (j[key].is_null()) return 0.0;
  const double v = opt_num(j, key, def, path);
  if (!(v > 0) || !std::isfinite(v))
    throw Error(path + ": " + key + " must be a positive number or null (no soft-cap), got " + j[key].dump(),
                "fix config.json");
  return v;
}

/// Gemma2Config defaults (configuration_gemma2.py): intermediate_size 9216, head_dim 256,
/// hidden_activation gelu_pytorch_tanh, rms_norm_eps 1e-6, rope_theta 10000, attention_bias false,
/// query_pre_attn_scalar 256, sliding_window 4096, layer_types local for even layers (l + 1 odd) and global
/// for odd ones, final_logit_softcapping 30, attn_logit_softcapping 50, tie_word_embeddings true. A tpshard
/// manifest (it has "arch") carries hidden_act, attention_scale and layer_windows instead of
/// hidden_activation, query_pre_attn_scalar and layer_types.
double parse(const json& j, ModelConfig& c, const std::string& path) {
  const bool manifest = has(j, "arch");
  if (!has(j, "head_dim")) c.head_dim = 256;
  c.intermediate_size = opt_int(j, "intermediate_size", 9216, path);
  c.norm = NormKind::RmsNorm;
  c.norm_eps = opt_num(j, "rms_norm_eps", 1e-6, path);
  c.norm_weight_offset = 1.0;
  // Gemma2MLP uses hidden_activation; a hidden_act next to it (Gemma 2 configs carry both) is not read
  c.hidden_act = has(j, "hidden_activation") || !manifest ? opt_act(j, "hidden_activation", "gelu_pytorch_tanh", path)
                                                           : opt_act(j, "hidden_act", "gelu_pytorch_tanh", path);
  c.gated_mlp = true;
  c.use_parallel_residual = false;
  c.post_norms = true;
  c.rope_theta = opt_num(j, "rope_theta", 10000.0, path);
  c.attention_bias = c.attention_out_bias = opt_bool(j, "attention_bias", false, path);
  c.mlp_bias = false;
  if (!has(j, "tie_word_embeddings")) c.tie_word_embeddings = true;
  if (opt_bool(j, "use_bidirectional_attention", false, path))
    throw Error(path + ": use_bidirectional_attention is true (non-causal attention)",
                "tpshard runs causal language models only; set it to false or null in config.json");
  if (has(j, "query_pre_attn_scalar") || !manifest) {
    const double q = opt_num(j, "query_pre_attn_scalar", 256.0, path);
    if (!(q > 0) || !std::isfinite(q))
      throw Error(path + ": query_pre_attn_scalar must be positive, got " + j["query_pre_attn_scalar"].dump(), "fix config.json");
    c.attention_scale = 1.0 / std::sqrt(q);  // query_pre_attn_scalar**-0.5
  } else {
    c.attention_scale = opt_num(j, "attention_scale", 0.0, path);
  }
  c.attn_logit_softcapping = softcap(j, "attn_logit_softcapping", 50.0, path);
  c.final_logit_softcapping = softcap(j, "final_logit_softcapping", 30.0, path);
  c.embedding_scale = std::sqrt(static_cast<double>(c.hidden_size));  // hidden_size**0.5
  std::vector<bool> sliding(static_cast<size_t>(c.num_hidden_layers));
  if (has(j, "layer_types")) {
    sliding = llama_family::sliding_layer_types(j, c.num_hidden_layers, path);
  } else {
    for (size_t l = 0; l < sliding.size(); ++l) sliding[l] = (l + 1) % 2 != 0;
  }
  const bool window_null = j.contains("sliding_window") && j["sliding_window"].is_null();
  llama_family::set_sliding_window(c, window_null ? 0 : opt_int(j, "sliding_window", 4096, path), sliding);
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
    llama_family::add_qkv_projections(v, c, l, a);
    llama_family::add_output_projection(v, c, l, a);
    add_tensor(v, R::AttnPostNormWeight, l, {p + "post_attention_layernorm.weight"}, {{H}}, T::Replicate);
    add_tensor(v, R::FfnNormWeight, l, {p + "pre_feedforward_layernorm.weight"}, {{H}}, T::Replicate);
    add_tensor(v, R::FfnGateUpWeight, l, {m + "gate_proj.weight", m + "up_proj.weight"}, {{I, H}, {I, H}}, T::GateUp);
    add_tensor(v, R::FfnDownWeight, l, {m + "down_proj.weight"}, {{H, I}}, T::ColsSplit);
    add_tensor(v, R::FfnPostNormWeight, l, {p + "post_feedforward_layernorm.weight"}, {{H}}, T::Replicate);
  }
  add_tensor(v, R::OutputNormWeight, -1, {"model.norm.weight"}, {{H}}, T::Replicate);
  if (!c.tie_word_embeddings) add_tensor(v, R::Output, -1, {"lm_head.weight"}, {{V, H}}, T::VocabRows);
  return v;
}

}  // namespace

const ArchSpec kGemma2Arch{Arch::Gemma2, "Gemma2ForCausalLM", "gemma2", parse, plan, llama_family::no_ignorable};

}  // namespace tpshard
