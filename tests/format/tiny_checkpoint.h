// tiny_checkpoint.h: builds small random Hugging Face checkpoints (config.json + model.safetensors)
// of the GPT-NeoX and Llama families in C++, keeping the source tensors as f32 for reference checks.
#pragma once
#include <map>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "test_util.h"

namespace tpshard::test {

/// A source tensor as f32 values with its shape (1-D or 2-D).
struct Mat {
  std::vector<int64_t> shape;
  std::vector<float> v;
  int64_t rows() const { return shape[0]; }
  int64_t cols() const { return shape.size() == 1 ? 1 : shape[1]; }
  float at(int64_t r, int64_t c) const { return v[static_cast<size_t>(r * cols() + c)]; }
};

struct TinyModel {
  nlohmann::json config;
  std::map<std::string, StEntry> st;  ///< what goes into model.safetensors
  std::map<std::string, Mat> ref;     ///< same tensors as f32
  void add(std::mt19937& rng, DType dt, const std::string& name, std::vector<int64_t> shape) {
    StEntry e = random_entry(rng, dt, shape);
    Mat m{shape, {}};
    m.v.resize(e.bytes.size() / dtype_size(dt));
    convert_elements(e.bytes.data(), dt, m.v.data(), DType::F32, m.v.size(), name);
    st[name] = std::move(e);
    ref[name] = std::move(m);
  }
  void save(const std::string& dir) const {
    std::filesystem::create_directories(dir);
    write_text(dir + "/config.json", config.dump(2));
    write_safetensors(dir + "/model.safetensors", st);
  }
};

struct LlamaSpec {
  int heads = 8, kv_heads = 2, head_dim = 4, hidden = 16, inter = 24, vocab = 37, layers = 2;
  bool tied = false, attention_bias = false, mlp_bias = false, qwen2 = false;
  DType dtype = DType::BF16;
  unsigned seed = 1;
};

inline TinyModel make_llama(const LlamaSpec& s) {
  TinyModel m;
  std::mt19937 rng(s.seed);
  const std::string arch = s.qwen2 ? "Qwen2ForCausalLM" : "LlamaForCausalLM";
  m.config = {{"architectures", {arch}}, {"model_type", s.qwen2 ? "qwen2" : "llama"}, {"hidden_size", s.hidden},
              {"intermediate_size", s.inter}, {"num_hidden_layers", s.layers}, {"num_attention_heads", s.heads},
              {"num_key_value_heads", s.kv_heads}, {"head_dim", s.head_dim}, {"vocab_size", s.vocab},
              {"max_position_embeddings", 64}, {"rms_norm_eps", 1e-5}, {"tie_word_embeddings", s.tied},
              {"torch_dtype", "bfloat16"}, {"bos_token_id", 1}, {"eos_token_id", 2}};
  if (!s.qwen2) {
    m.config["attention_bias"] = s.attention_bias;
    m.config["mlp_bias"] = s.mlp_bias;
  }
  const bool qkv_bias = s.qwen2 || s.attention_bias, o_bias = !s.qwen2 && s.attention_bias;
  const int64_t q = s.heads * s.head_dim, kv = s.kv_heads * s.head_dim;
  m.add(rng, s.dtype, "model.embed_tokens.weight", {s.vocab, s.hidden});
  for (int l = 0; l < s.layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    m.add(rng, s.dtype, p + "input_layernorm.weight", {s.hidden});
    m.add(rng, s.dtype, p + "self_attn.q_proj.weight", {q, s.hidden});
    m.add(rng, s.dtype, p + "self_attn.k_proj.weight", {kv, s.hidden});
    m.add(rng, s.dtype, p + "self_attn.v_proj.weight", {kv, s.hidden});
    if (qkv_bias) {
      m.add(rng, s.dtype, p + "self_attn.q_proj.bias", {q});
      m.add(rng, s.dtype, p + "self_attn.k_proj.bias", {kv});
      m.add(rng, s.dtype, p + "self_attn.v_proj.bias", {kv});
    }
    m.add(rng, s.dtype, p + "self_attn.o_proj.weight", {s.hidden, q});
    if (o_bias) m.add(rng, s.dtype, p + "self_attn.o_proj.bias", {s.hidden});
    m.add(rng, s.dtype, p + "post_attention_layernorm.weight", {s.hidden});
    m.add(rng, s.dtype, p + "mlp.gate_proj.weight", {s.inter, s.hidden});
    m.add(rng, s.dtype, p + "mlp.up_proj.weight", {s.inter, s.hidden});
    m.add(rng, s.dtype, p + "mlp.down_proj.weight", {s.hidden, s.inter});
    if (s.mlp_bias) {
      m.add(rng, s.dtype, p + "mlp.gate_proj.bias", {s.inter});
      m.add(rng, s.dtype, p + "mlp.up_proj.bias", {s.inter});
      m.add(rng, s.dtype, p + "mlp.down_proj.bias", {s.hidden});
    }
  }
  m.add(rng, s.dtype, "model.norm.weight", {s.hidden});
  if (!s.tied) m.add(rng, s.dtype, "lm_head.weight", {s.vocab, s.hidden});
  return m;
}

struct NeoxSpec {
  int heads = 8, head_dim = 4, inter = 64, vocab = 37, layers = 2;
  bool tied = false, parallel_residual = true;
  DType dtype = DType::F16;
  unsigned seed = 2;
};

inline TinyModel make_neox(const NeoxSpec& s) {
  TinyModel m;
  std::mt19937 rng(s.seed);
  const int64_t H = s.heads * s.head_dim;
  m.config = {{"architectures", {"GPTNeoXForCausalLM"}}, {"model_type", "gpt_neox"}, {"hidden_size", H},
              {"intermediate_size", s.inter}, {"num_hidden_layers", s.layers}, {"num_attention_heads", s.heads},
              {"vocab_size", s.vocab}, {"max_position_embeddings", 64}, {"rotary_pct", 0.5},
              {"rotary_emb_base", 10000}, {"layer_norm_eps", 1e-5}, {"use_parallel_residual", s.parallel_residual},
              {"tie_word_embeddings", s.tied}, {"hidden_act", "gelu"}, {"torch_dtype", "float16"}};
  m.add(rng, s.dtype, "gpt_neox.embed_in.weight", {s.vocab, H});
  for (int l = 0; l < s.layers; ++l) {
    const std::string p = "gpt_neox.layers." + std::to_string(l) + ".";
    m.add(rng, s.dtype, p + "input_layernorm.weight", {H});
    m.add(rng, s.dtype, p + "input_layernorm.bias", {H});
    m.add(rng, s.dtype, p + "attention.query_key_value.weight", {3 * H, H});
    m.add(rng, s.dtype, p + "attention.query_key_value.bias", {3 * H});
    m.add(rng, s.dtype, p + "attention.dense.weight", {H, H});
    m.add(rng, s.dtype, p + "attention.dense.bias", {H});
    m.add(rng, s.dtype, p + "post_attention_layernorm.weight", {H});
    m.add(rng, s.dtype, p + "post_attention_layernorm.bias", {H});
    m.add(rng, s.dtype, p + "mlp.dense_h_to_4h.weight", {s.inter, H});
    m.add(rng, s.dtype, p + "mlp.dense_h_to_4h.bias", {s.inter});
    m.add(rng, s.dtype, p + "mlp.dense_4h_to_h.weight", {H, s.inter});
    m.add(rng, s.dtype, p + "mlp.dense_4h_to_h.bias", {H});
  }
  m.add(rng, s.dtype, "gpt_neox.final_layer_norm.weight", {H});
  m.add(rng, s.dtype, "gpt_neox.final_layer_norm.bias", {H});
  if (!s.tied) m.add(rng, s.dtype, "embed_out.weight", {s.vocab, H});
  return m;
}

}  // namespace tpshard::test
