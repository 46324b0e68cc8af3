// model_tensors.h: a typed view of one rank's tensors, one member per TensorRole (model/tensor_plan.h),
// generic over what a backend holds per tensor: the CPU backend binds std::vector<float> (widened),
// the CUDA backend const void* views into its weight arena. Shapes are the tensor plan's (checked once
// when the shard is opened, model/rank_shard.h), so a backend binds and never checks again.
#pragma once
#include <vector>

#include "model/tensor_plan.h"

namespace tpshard {

/// One transformer block; members named and shaped as the TensorRole of the same name. T{} = absent.
template <typename T>
struct LayerTensors {
  T attn_norm_weight{}, attn_norm_bias{};
  T attn_qkv_weight{}, attn_qkv_bias{};
  T attn_q_norm_weight{}, attn_k_norm_weight{};  ///< per-head q/k RMSNorm (Qwen3)
  T attn_output_weight{}, attn_output_bias{};
  T attn_post_norm_weight{};  ///< RMSNorm of the attention output before the residual add (post_norms)
  T ffn_norm_weight{}, ffn_norm_bias{};
  T ffn_gate_up_weight{}, ffn_gate_up_bias{};  ///< gated MLP
  T ffn_up_weight{}, ffn_up_bias{};            ///< non-gated MLP
  T ffn_down_weight{}, ffn_down_bias{};
  T ffn_post_norm_weight{};  ///< RMSNorm of the MLP output before the residual add (post_norms)
  T ffn_router_weight{};     ///< mixture of experts: router [experts, hidden]
  T ffn_experts_gate_up_weight{}, ffn_experts_down_weight{};  ///< mixture of experts: stacked per expert
};

/// The whole rank. output is T{} when tie_word_embeddings (use token_embd).
template <typename T>
struct ModelTensors {
  T token_embd{};
  T position_embd{};  ///< learned position embeddings (PositionKind::Learned); T{} with rotary
  std::vector<LayerTensors<T>> layers;
  T output_norm_weight{}, output_norm_bias{};
  T output{};
  T output_bias{};  ///< the LM head's bias (GPT-J); T{} = none
};

/// The member of m that holds role (of block `layer` for layer roles).
template <typename T>
T& tensor_slot(ModelTensors<T>& m, TensorRole role, int layer) {
  switch (role) {
    case TensorRole::TokenEmbd: return m.token_embd;
    case TensorRole::PosEmbd: return m.position_embd;
    case TensorRole::OutputNormWeight: return m.output_norm_weight;
    case TensorRole::OutputNormBias: return m.output_norm_bias;
    case TensorRole::Output: return m.output;
    case TensorRole::OutputBias: return m.output_bias;
    case TensorRole::AttnNormWeight: return m.layers.at(layer).attn_norm_weight;
    case TensorRole::AttnNormBias: return m.layers.at(layer).attn_norm_bias;
    case TensorRole::AttnQkvWeight: return m.layers.at(layer).attn_qkv_weight;
    case TensorRole::AttnQkvBias: return m.layers.at(layer).attn_qkv_bias;
    case TensorRole::AttnQNormWeight: return m.layers.at(layer).attn_q_norm_weight;
    case TensorRole::AttnKNormWeight: return m.layers.at(layer).attn_k_norm_weight;
    case TensorRole::AttnOutputWeight: return m.layers.at(layer).attn_output_weight;
    case TensorRole::AttnOutputBias: return m.layers.at(layer).attn_output_bias;
    case TensorRole::FfnNormWeight: return m.layers.at(layer).ffn_norm_weight;
    case TensorRole::FfnNormBias: return m.layers.at(layer).ffn_norm_bias;
    case TensorRole::FfnGateUpWeight: return m.layers.at(layer).ffn_gate_up_weight;
    case TensorRole::FfnGateUpBias: return m.layers.at(layer).ffn_gate_up_bias;
    case TensorRole::FfnUpWeight: return m.layers.at(layer).ffn_up_weight;
    case TensorRole::FfnUpBias: return m.layers.at(layer).ffn_up_bias;
    case TensorRole::FfnDownWeight: return m.layers.at(layer).ffn_down_weight;
    case TensorRole::FfnDownBias: return m.layers.at(layer).ffn_down_bias;
    case TensorRole::AttnPostNormWeight: return m.layers.at(layer).attn_post_norm_weight;
    case TensorRole::FfnPostNormWeight: return m.layers.at(layer).ffn_post_norm_weight;
    case TensorRole::FfnRouterWeight: return m.layers.at(layer).ffn_router_weight;
    case TensorRole::FfnExpertsGateUpWeight: return m.layers.at(layer).ffn_experts_gate_up_weight;
    case TensorRole::FfnExpertsDownWeight: return m.layers.at(layer).ffn_experts_down_weight;
  }
  return m.token_embd;  // unreachable: every role is listed above
}

/// Bind every tensor of the plan: out's slot of each planned tensor t gets get(t). `get` is called in
/// plan (arena) order, once per tensor.
template <typename T, typename Get>
ModelTensors<T> bind_model_tensors(const ModelConfig& c, const std::vector<OutputTensor>& plan, Get&& get) {
  ModelTensors<T> m;
  m.layers.resize(static_cast<size_t>(c.num_hidden_layers));
  for (const OutputTensor& t : plan) tensor_slot(m, t.role, t.layer) = get(t);
  return m;
}

}  // namespace tpshard
