// cpu_weights.h: one tp_rank's weights for the CPU backend, read from its shard file and widened to f32.
// Names and layouts: format/tensor_names.h. Owns: loading and shape checks. Does not own: the maths.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "format/model_config.h"
#include "format/shard_file.h"

namespace tpshard::cpu {

/// One transformer block on one rank. Shapes use hpr = heads_per_rank, kvpr = kv_heads_per_rank,
/// ipr = intermediate_size_per_rank, hd = head_dim, H = hidden_size. Empty vectors = absent.
struct LayerWeights {
  std::vector<float> attn_norm_weight, attn_norm_bias;   ///< [H]
  std::vector<float> attn_qkv_weight;                    ///< [(hpr + 2 kvpr) hd, H]: Q heads | K heads | V heads
  std::vector<float> attn_qkv_bias;                      ///< [(hpr + 2 kvpr) hd]
  std::vector<float> attn_output_weight;                 ///< [H, hpr hd] (row parallel)
  std::vector<float> attn_output_bias;                   ///< [H] added once after the all_reduce
  std::vector<float> ffn_norm_weight, ffn_norm_bias;     ///< [H]
  std::vector<float> ffn_gate_up_weight;                 ///< [2 ipr, H] gated MLP: gate rows | up rows
  std::vector<float> ffn_gate_up_bias;                   ///< [2 ipr] (Llama mlp_bias)
  std::vector<float> ffn_up_weight, ffn_up_bias;         ///< [ipr, H], [ipr] (non-gated MLP)
  std::vector<float> ffn_down_weight;                    ///< [H, ipr] (row parallel)
  std::vector<float> ffn_down_bias;                      ///< [H] added once after the all_reduce
};

struct ModelWeights {
  std::vector<float> token_embd;                         ///< [vocab_per_rank, H] (vocab parallel)
  std::vector<LayerWeights> layers;
  std::vector<float> output_norm_weight, output_norm_bias;  ///< [H]
  std::vector<float> output;                             ///< [vocab_per_rank, H]; empty when tied (use token_embd)
  uint64_t bytes = 0;                                    ///< f32 bytes held
};

/// Read every tensor this rank needs, checking each local shape against the config and layout.
/// Throws Error naming the tensor and the file when one is missing, has the wrong shape, or fails its
/// hash check (verify).
ModelWeights load_weights(const ShardReader& shard, const ModelConfig& c, const TpLayout& layout, bool verify);

}  // namespace tpshard::cpu
