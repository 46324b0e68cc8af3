// tensor_names.h: the names of tensors inside shard files, and their layout (docs/FORMAT.md,
// "Tensor names"). Weights are stored as [out_features_per_rank, in_features] row-major, the layout
// nn.Linear uses, so both y = x W^T GEMMs (cuBLAS "TN") and CPU dot products read contiguous rows.
//
//   token_embd.weight              [vocab_per_rank, hidden]                         vocab
//   position_embd.weight           [max_position_embeddings, hidden]  (learned positions)  replicated
//   blk.N.attn_norm.weight / .bias [hidden]                                          replicated (bias: LayerNorm only)
//   blk.N.attn_qkv.weight          [(heads_per_rank + 2*kv_heads_per_rank)*head_dim, hidden]  column
//                                  rows: this rank's Q heads, then its K heads, then its V heads
//   blk.N.attn_qkv.bias            [(heads_per_rank + 2*kv_heads_per_rank)*head_dim]         column (attention_bias)
//   blk.N.attn_q_norm.weight       [head_dim]  (qk_norm: RMSNorm of each Q head)     replicated
//                                  [heads*head_dim]  (qk_norm_across_heads: of the whole Q)
//   blk.N.attn_k_norm.weight       [head_dim]  (qk_norm: RMSNorm of each K head)     replicated
//                                  [kv_heads*head_dim]  (qk_norm_across_heads: of the whole K)
//   blk.N.attn_output.weight       [hidden, heads_per_rank*head_dim]                 row
//   blk.N.attn_output.bias         [hidden]                                          replicated, added once after all_reduce
//   blk.N.attn_post_norm.weight    [hidden]  (post_norms: RMSNorm of the attention output)  replicated
//   blk.N.ffn_norm.weight / .bias  [hidden]                                          replicated
//   blk.N.ffn_gate_up.weight       [2*intermediate_per_rank, hidden]  (gated MLP)    column; rows: gate, then up
//   blk.N.ffn_gate_up.bias         [2*intermediate_per_rank]          (mlp_bias)     column; gate, then up
//   blk.N.ffn_up.weight / .bias    [intermediate_per_rank, hidden]    (GPT-NeoX)     column
//   blk.N.ffn_down.weight          [hidden, intermediate_per_rank]                   row
//   blk.N.ffn_down.bias            [hidden]                                          replicated, added once after all_reduce
//   blk.N.ffn_post_norm.weight     [hidden]  (post_norms: RMSNorm of the MLP output)  replicated
//   blk.N.ffn_router.weight        [experts, hidden]  (mixture of experts)           replicated
//   blk.N.ffn_experts_gate_up.weight [experts*2*intermediate_per_rank, hidden]        column; per expert: gate rows, then up rows
//   blk.N.ffn_experts_down.weight  [experts*hidden, intermediate_per_rank]            row; per expert: its down rows
//   output_norm.weight / .bias     [hidden]                                          replicated
//   output.weight                  [vocab_per_rank, hidden]   absent when tie_word_embeddings  vocab
//
// Rotary convention: Hugging Face's rotate_half (pairs i and i + rotary_ndims/2), for both families.
#pragma once
#include <string>

namespace tpshard::names {

inline std::string blk(int layer, const char* suffix) { return "blk." + std::to_string(layer) + "." + suffix; }
inline const char* kTokenEmbd = "token_embd.weight";
inline const char* kPosEmbd = "position_embd.weight";
inline const char* kOutputNormWeight = "output_norm.weight";
inline const char* kOutputNormBias = "output_norm.bias";
inline const char* kOutput = "output.weight";
inline const char* kOutputBias = "output.bias";

}  // namespace tpshard::names
