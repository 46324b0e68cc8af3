// weights.h: named device-pointer views of one rank's weights inside the WeightArena, checked
// against the model config once at startup (shapes and dtype), so the forward pass never looks a
// tensor up by name. Layout of every tensor: format/tensor_names.h.
#pragma once
#include <vector>

#include "format/dtype.h"
#include "format/model_config.h"
#include "runtime/cuda/weight_arena.h"

namespace tpshard::cuda {

/// One transformer block. Optional tensors are nullptr when the model has none.
struct LayerWeights {
  const void* attn_norm_weight = nullptr;   ///< [hidden]
  const void* attn_norm_bias = nullptr;     ///< [hidden], LayerNorm only
  const void* attn_qkv_weight = nullptr;    ///< [(heads_pr + 2*kv_heads_pr) * head_dim, hidden]
  const void* attn_qkv_bias = nullptr;      ///< [(heads_pr + 2*kv_heads_pr) * head_dim]
  const void* attn_output_weight = nullptr; ///< [hidden, heads_pr * head_dim]
  const void* attn_output_bias = nullptr;   ///< [hidden], added once after all_reduce
  const void* ffn_norm_weight = nullptr;    ///< [hidden]
  const void* ffn_norm_bias = nullptr;      ///< [hidden], LayerNorm only
  const void* ffn_up_weight = nullptr;      ///< gated: ffn_gate_up [2*inter_pr, hidden]; else ffn_up [inter_pr, hidden]
  const void* ffn_up_bias = nullptr;        ///< [2*inter_pr] or [inter_pr]
  const void* ffn_down_weight = nullptr;    ///< [hidden, inter_pr]
  const void* ffn_down_bias = nullptr;      ///< [hidden], added once after all_reduce
};

struct ModelWeights {
  DType dtype = DType::F16;                 ///< every tensor has this dtype
  const void* token_embd = nullptr;         ///< [vocab_pr, hidden]
  std::vector<LayerWeights> layers;
  const void* output_norm_weight = nullptr; ///< [hidden]
  const void* output_norm_bias = nullptr;   ///< [hidden], LayerNorm only
  const void* output = nullptr;             ///< [vocab_pr, hidden]; == token_embd when tied
};

/// Resolve and check every tensor. Throws Error naming the tensor and the expected/actual shape or
/// dtype when the arena does not match the config (hint: re-run tpshard convert).
ModelWeights bind_weights(const WeightArena& arena, const ModelConfig& c, const TpLayout& layout);

}  // namespace tpshard::cuda
