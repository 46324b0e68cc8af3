// gpt_neo.cpp: GPTNeoForCausalLM (EleutherAI GPT-Neo 125M / 1.3B / 2.7B). Learned absolute position
// embeddings (wpe) added to the token embeddings, no rotary; layers alternate global and local
// attention (attention_types), local layers see the last window_size positions; attention scores are
// not scaled by 1/sqrt(head_dim); separate q/k/v projections without bias, out_proj with bias;
// LayerNorm with bias, gelu_new MLP with biases, sequential residual, lm_head tied to wte.
// Reference: transformers' modeling_gpt_neo.py / configuration_gpt_neo.py.
#include <string>
#include <vector>

#include "format/error.h"
#include "model/arch/registry.h"
#include "model/config_fields.h"

namespace tpshard {

namespace {

using namespace config_fields;
using nlohmann::json;

/// attention_types ([[["global", "local"], 12]]: each entry a pattern repeated n times) -> per-layer
/// windows, 0 for global and window_size for local. Throws Error naming attention_types.
std::vector<int64_t> expand_attention_types(const json& types, int64_t window, const std::string& path) {
  const std::string hint = "attention_types must look like [[[\"global\", \"local\"], 12]]: patterns of \"global\" / "
                           "\"local\" with a repeat count (fix config.json)";
  if (!types.is_array()) throw Error(path + ": attention_types is not a list", hint);
  std::vector<int64_t> out;
  for (const json& item : types) {
    if (!item.is_array() || item.size() != 2 || !item[0].is_array() || !item[1].is_number_integer() ||
        item[1].get<int64_t>() < 0)
      throw Error(path + ": attention_types entry " + item.dump() + " is not [[types...], count]", hint);
    for (int64_t r = 0; r < item[1].get<int64_t>(); ++r)
      for (const json& t : item[0]) {
        const std::string name = t.is_string() ? t.get<std::string>() : t.dump();
        if (name == "global") out.push_back(0);
        else if (name == "local") out.push_back(window);
        else
          throw Error(path + ": unknown attention type \"" + name + "\" in attention_types",
                      "supported attention types: global, local (fix attention_types in config.json)");
      }
  }
  return out;
}

/// transformers GPTNeoConfig defaults: attention_types [[["global", "local"], 12]], window_size 256,
/// intermediate_size null (4 * hidden), activation_function gelu_new, layer_norm_epsilon 1e-5,
/// tie_word_embeddings true. A tpshard manifest carries the expanded layer_windows, hidden_act and
/// layer_norm_eps instead.
double parse(const json& j, ModelConfig& c, const std::string& path) {
  c.position_embedding = PositionKind::Learned;
  c.attention_scale = 1.0;
  c.intermediate_size = opt_int(j, "intermediate_size", 4 * c.hidden_size, path);
  c.norm = NormKind::LayerNorm;
  c.norm_eps = has(j, "layer_norm_epsilon") ? opt_num(j, "layer_norm_epsilon", 1e-5, path)
                                            : opt_num(j, "layer_norm_eps", 1e-5, path);
  c.hidden_act = has(j, "activation_function") ? opt_act(j, "activation_function", "gelu_new", path)
                                               : opt_act(j, "hidden_act", "gelu_new", path);
  c.gated_mlp = false;
  c.use_parallel_residual = false;
  c.attention_bias = false;
  c.attention_out_bias = true;
  c.mlp_bias = true;
  if (!has(j, "tie_word_embeddings")) c.tie_word_embeddings = true;
  if (!has(j, "attention_types") && has(j, "layer_windows")) {  // a tpshard manifest
    if (!j["layer_windows"].is_array()) throw Error(path + ": layer_windows is not a list", "re-run tpshard convert");
    c.layer_windows.clear();
    for (const json& w : j["layer_windows"]) {
      if (!w.is_number_integer()) throw Error(path + ": layer_windows must hold integers", "re-run tpshard convert");
      c.layer_windows.push_back(w.get<int64_t>());
    }
  } else {
    const int64_t window = opt_int(j, "window_size", 256, path);
    if (window <= 0) throw Error(path + ": window_size must be positive", "fix config.json");
    const json def = json::parse(R"([[["global", "local"], 12]])");
    c.layer_windows = expand_attention_types(has(j, "attention_types") ? j["attention_types"] : def, window, path);
  }
  return 1.0;  // no rotary (position_embedding Learned)
}

std::vector<OutputTensor> plan(const ModelConfig& c) {
  const int64_t H = c.hidden_size, I = c.intermediate_size, V = c.vocab_size, P = c.max_position_embeddings;
  const int64_t q_rows = c.num_attention_heads * c.head_dim;
  const int64_t kv_rows = c.num_key_value_heads * c.head_dim;
  using R = TensorRole;
  using T = Transform;
  std::vector<OutputTensor> v;
  add_tensor(v, R::TokenEmbd, -1, {"transformer.wte.weight"}, {{V, H}}, T::VocabRows);
  add_tensor(v, R::PosEmbd, -1, {"transformer.wpe.weight"}, {{P, H}}, T::Replicate);
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = "transformer.h." + std::to_string(l) + ".";
    const std::string a = p + "attn.attention.";
    add_tensor(v, R::AttnNormWeight, l, {p + "ln_1.weight"}, {{H}}, T::Replicate);
    add_tensor(v, R::AttnNormBias, l, {p + "ln_1.bias"}, {{H}}, T::Replicate);
    add_tensor(v, R::AttnQkvWeight, l, {a + "q_proj.weight", a + "k_proj.weight", a + "v_proj.weight"},
               {{q_rows, H}, {kv_rows, H}, {kv_rows, H}}, T::LlamaQkv);
    add_tensor(v, R::AttnOutputWeight, l, {a + "out_proj.weight"}, {{H, q_rows}}, T::ColsSplit);
    add_tensor(v, R::AttnOutputBias, l, {a + "out_proj.bias"}, {{H}}, T::Replicate);
    add_tensor(v, R::FfnNormWeight, l, {p + "ln_2.weight"}, {{H}}, T::Replicate);
    add_tensor(v, R::FfnNormBias, l, {p + "ln_2.bias"}, {{H}}, T::Replicate);
    add_tensor(v, R::FfnUpWeight, l, {p + "mlp.c_fc.weight"}, {{I, H}}, T::RowsSplit);
    add_tensor(v, R::FfnUpBias, l, {p + "mlp.c_fc.bias"}, {{I}}, T::RowsSplit);
    add_tensor(v, R::FfnDownWeight, l, {p + "mlp.c_proj.weight"}, {{H, I}}, T::ColsSplit);
    add_tensor(v, R::FfnDownBias, l, {p + "mlp.c_proj.bias"}, {{H}}, T::Replicate);
  }
  add_tensor(v, R::OutputNormWeight, -1, {"transformer.ln_f.weight"}, {{H}}, T::Replicate);
  add_tensor(v, R::OutputNormBias, -1, {"transformer.ln_f.bias"}, {{H}}, T::Replicate);
  if (!c.tie_word_embeddings) add_tensor(v, R::Output, -1, {"lm_head.weight"}, {{V, H}}, T::VocabRows);
  return v;
}

/// The causal / local mask buffers older checkpoints saved with the weights.
bool ignorable(const std::string& n) {
  return ends_with(n, ".attn.attention.bias") || ends_with(n, ".attn.attention.masked_bias");
}

}  // namespace

const ArchSpec kGptNeoArch{Arch::GptNeo, "GPTNeoForCausalLM", "gpt_neo", parse, plan, ignorable};

}  // namespace tpshard
