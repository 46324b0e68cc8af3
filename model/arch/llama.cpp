// llama.cpp: LlamaForCausalLM (Llama 2 / 3, SmolLM2, TinyLlama), and the Llama-style block shared with
// Mistral and Qwen2 (llama_family.h).
#include <string>
#include <vector>

#include "format/error.h"
#include "model/arch/llama_family.h"
#include "model/arch/registry.h"
#include "model/config_fields.h"

namespace tpshard {

namespace llama_family {

using namespace config_fields;
using nlohmann::json;

double parse_common(const nlohmann::json& j, ModelConfig& c, const std::string& path) {
  c.intermediate_size = req_int(j, "intermediate_size", path);
  c.norm = NormKind::RmsNorm;
  c.norm_eps = opt_num(j, "rms_norm_eps", 1e-6, path);
  c.hidden_act = opt_act(j, "hidden_act", "silu", path);
  c.gated_mlp = true;
  c.use_parallel_residual = false;
  c.rope_theta = opt_num(j, "rope_theta", 10000.0, path);
  return opt_num(j, "partial_rotary_factor", 1.0, path);
}

void set_sliding_window(ModelConfig& c, int64_t window, const std::vector<bool>& sliding) {
  c.sliding_window = 0;
  c.layer_windows.clear();
  // a window of max_position_embeddings or more never limits attention
  if (window <= 0 || window >= c.max_position_embeddings) return;
  bool any = false;
  for (bool s : sliding) any = any || s;
  if (!any) return;
  c.sliding_window = window;
  for (bool s : sliding) c.layer_windows.push_back(s ? window : 0);
}

std::vector<bool> qwen_sliding_layers(const json& j, int64_t layers, const std::string& path) {
  std::vector<bool> out;
  if (!has(j, "layer_types")) {
    const int64_t first = opt_int(j, "max_window_layers", 28, path);
    for (int64_t l = 0; l < layers; ++l) out.push_back(l >= first);
    return out;
  }
  return sliding_layer_types(j, layers, path);
}

std::vector<bool> sliding_layer_types(const json& j, int64_t layers, const std::string& path) {
  std::vector<bool> out;
  const json& t = j["layer_types"];
  const std::string hint = "layer_types must list \"full_attention\" or \"sliding_attention\" for each layer (fix config.json)";
  if (!t.is_array() || static_cast<int64_t>(t.size()) != layers)
    throw Error(path + ": layer_types is not a list of " + std::to_string(layers) + " entries", hint);
  for (const json& e : t) {
    const std::string name = e.is_string() ? e.get<std::string>() : e.dump();
    if (name != "full_attention" && name != "sliding_attention")
      throw Error(path + ": unknown layer type \"" + name + "\" in layer_types", hint);
    out.push_back(name == "sliding_attention");
  }
  return out;
}

void parse_qwen_sliding_window(const nlohmann::json& j, ModelConfig& c, const std::string& path) {
  if (opt_bool(j, "use_sliding_window", false, path))
    set_sliding_window(c, opt_int(j, "sliding_window", 0, path), qwen_sliding_layers(j, c.num_hidden_layers, path));
}

std::vector<OutputTensor> plan(const ModelConfig& c) { return plan_block(c, Projections::Separate); }

void add_qkv_projections(std::vector<OutputTensor>& v, const ModelConfig& c, int l, const std::string& attn) {
  const int64_t H = c.hidden_size, q_rows = c.num_attention_heads * c.head_dim, kv_rows = c.num_key_value_heads * c.head_dim;
  add_tensor(v, TensorRole::AttnQkvWeight, l, {attn + "q_proj.weight", attn + "k_proj.weight", attn + "v_proj.weight"},
             {{q_rows, H}, {kv_rows, H}, {kv_rows, H}}, Transform::LlamaQkv);
  if (c.attention_bias)
    add_tensor(v, TensorRole::AttnQkvBias, l, {attn + "q_proj.bias", attn + "k_proj.bias", attn + "v_proj.bias"},
               {{q_rows}, {kv_rows}, {kv_rows}}, Transform::LlamaQkv);
}

void add_output_projection(std::vector<OutputTensor>& v, const ModelConfig& c, int l, const std::string& attn) {
  const int64_t H = c.hidden_size, q_rows = c.num_attention_heads * c.head_dim;
  add_tensor(v, TensorRole::AttnOutputWeight, l, {attn + "o_proj.weight"}, {{H, q_rows}}, Transform::ColsSplit);
  if (c.attention_out_bias)
    add_tensor(v, TensorRole::AttnOutputBias, l, {attn + "o_proj.bias"}, {{H}}, Transform::Replicate);
}

std::vector<OutputTensor> plan_block(const ModelConfig& c, Projections projections) {
  const int64_t H = c.hidden_size, I = c.intermediate_size, V = c.vocab_size, hd = c.head_dim;
  const int64_t q_rows = c.num_attention_heads * hd, kv_rows = c.num_key_value_heads * hd;
  const bool fused = projections == Projections::Fused;
  using R = TensorRole;
  using T = Transform;
  std::vector<OutputTensor> v;
  add_tensor(v, R::TokenEmbd, -1, {"model.embed_tokens.weight"}, {{V, H}}, T::VocabRows);
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    const std::string a = p + "self_attn.", m = p + "mlp.";
    add_tensor(v, R::AttnNormWeight, l, {p + "input_layernorm.weight"}, {{H}}, T::Replicate);
    if (fused) {
      add_tensor(v, R::AttnQkvWeight, l, {a + "qkv_proj.weight"}, {{q_rows + 2 * kv_rows, H}}, T::PackedQkv);
      if (c.attention_bias)
        add_tensor(v, R::AttnQkvBias, l, {a + "q_proj.bias", a + "k_proj.bias", a + "v_proj.bias"},
                   {{q_rows}, {kv_rows}, {kv_rows}}, T::LlamaQkv);
    } else {
      add_qkv_projections(v, c, l, a);
    }
    if (c.qk_norm) {
      add_tensor(v, R::AttnQNormWeight, l, {a + "q_norm.weight"}, {{hd}}, T::Replicate);
      add_tensor(v, R::AttnKNormWeight, l, {a + "k_norm.weight"}, {{hd}}, T::Replicate);
    }
    add_output_projection(v, c, l, a);
    add_tensor(v, R::FfnNormWeight, l, {p + "post_attention_layernorm.weight"}, {{H}}, T::Replicate);
    if (fused) {
      add_tensor(v, R::FfnGateUpWeight, l, {m + "gate_up_proj.weight"}, {{2 * I, H}}, T::PackedGateUp);
    } else {
      add_tensor(v, R::FfnGateUpWeight, l, {m + "gate_proj.weight", m + "up_proj.weight"}, {{I, H}, {I, H}}, T::GateUp);
    }
    if (c.mlp_bias)
      add_tensor(v, R::FfnGateUpBias, l, {m + "gate_proj.bias", m + "up_proj.bias"}, {{I}, {I}}, T::GateUp);
    add_tensor(v, R::FfnDownWeight, l, {m + "down_proj.weight"}, {{H, I}}, T::ColsSplit);
    if (c.mlp_bias) add_tensor(v, R::FfnDownBias, l, {m + "down_proj.bias"}, {{H}}, T::Replicate);
  }
  add_tensor(v, R::OutputNormWeight, -1, {"model.norm.weight"}, {{H}}, T::Replicate);
  if (!c.tie_word_embeddings) add_tensor(v, R::Output, -1, {"lm_head.weight"}, {{V, H}}, T::VocabRows);
  return v;
}

void parse_llama_biases(const nlohmann::json& j, ModelConfig& c, const std::string& path) {
  c.attention_bias = opt_bool(j, "attention_bias", false, path);
  c.attention_out_bias = c.attention_bias;
  c.mlp_bias = opt_bool(j, "mlp_bias", false, path);
}

bool no_ignorable(const std::string&) { return false; }

}  // namespace llama_family

namespace {

double parse(const nlohmann::json& j, ModelConfig& c, const std::string& path) {
  const double partial = llama_family::parse_common(j, c, path);
  llama_family::parse_llama_biases(j, c, path);
  return partial;
}

}  // namespace

const ArchSpec kLlamaArch{Arch::Llama, "LlamaForCausalLM", "llama", parse, llama_family::plan, llama_family::no_ignorable};

}  // namespace tpshard
