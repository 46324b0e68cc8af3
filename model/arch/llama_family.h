// llama_family.h: the block shared by the Llama-style architectures (llama.cpp, mistral.cpp, qwen2.cpp, qwen3.cpp):
// RMSNorm, full rotary, gated silu MLP; q/k/v and gate/up stored separately (Llama, Mistral, Qwen2) or fused
// (phi3.cpp), either way fused per rank.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/model_config.h"
#include "model/tensor_plan.h"

namespace tpshard::llama_family {

/// transformers LlamaConfig defaults for the fields every Llama-style config shares (intermediate_size
/// required, rms_norm_eps 1e-6, hidden_act silu, rope_theta 10000); biases and the sliding window are
/// left to the architecture. Returns partial_rotary_factor (default 1).
double parse_common(const nlohmann::json& j, ModelConfig& c, const std::string& path);

/// LlamaConfig's biases: attention_bias on q, k, v and o_proj; mlp_bias on the three MLP projections
/// (both default false).
void parse_llama_biases(const nlohmann::json& j, ModelConfig& c, const std::string& path);

/// Mistral / Qwen2 sliding-window attention as per-layer windows: c.layer_windows[l] = window where
/// sliding[l] (one entry per layer), else 0; c.sliding_window = window. Both empty / 0 when window <= 0,
/// window >= max_position_embeddings (it never limits attention) or no layer slides.
void set_sliding_window(ModelConfig& c, int64_t window, const std::vector<bool>& sliding);

/// Qwen2 / Qwen3 sliding-window attention as transformers 5 applies it (configuration_qwen2.py,
/// modeling_qwen2.py): only when use_sliding_window is true (otherwise sliding_window is None), on the
/// layers whose layer_types entry is "sliding_attention"; a config without layer_types gets
/// "sliding_attention" for the layers l >= max_window_layers (default 28). Throws Error naming path for
/// a layer_types list of the wrong length or with an unknown entry.
void parse_qwen_sliding_window(const nlohmann::json& j, ModelConfig& c, const std::string& path);

/// config.json's layer_types (present, one entry per layer) as flags: true for "sliding_attention", false
/// for "full_attention". Throws Error naming path for a list of the wrong length or an unknown entry.
std::vector<bool> sliding_layer_types(const nlohmann::json& j, int64_t layers, const std::string& path);

/// How a Llama-style checkpoint stores its q/k/v and gate/up projections.
enum class Projections {
  Separate,  ///< q_proj, k_proj, v_proj; gate_proj, up_proj (Llama, Mistral, Qwen2), with optional biases
  Fused,     ///< qkv_proj [q | k | v]; gate_up_proj [gate | up] (Phi-3), no biases
};

/// Layer l's q_proj / k_proj / v_proj under `attn` (e.g. "model.layers.3.self_attn."): one AttnQkvWeight
/// (Transform::LlamaQkv: q [heads x head_dim, hidden], k and v [kv_heads x head_dim, hidden]) and, when
/// c.attention_bias, the AttnQkvBias of the three biases.
void add_qkv_projections(std::vector<OutputTensor>& v, const ModelConfig& c, int l, const std::string& attn);

/// Layer l's o_proj under `attn`: AttnOutputWeight [hidden, heads x head_dim] (row parallel: ColsSplit)
/// and, when c.attention_out_bias, its AttnOutputBias [hidden] (replicated).
void add_output_projection(std::vector<OutputTensor>& v, const ModelConfig& c, int l, const std::string& attn);

/// Tensors under model.* and lm_head.weight (HF LlamaForCausalLM names, projections stored as given).
std::vector<OutputTensor> plan_block(const ModelConfig& c, Projections projections);

/// plan_block(c, Projections::Separate).
std::vector<OutputTensor> plan(const ModelConfig& c);

/// No architecture-specific buffers.
bool no_ignorable(const std::string& hf_name);

}  // namespace tpshard::llama_family
