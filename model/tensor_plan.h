// tensor_plan.h: the single model description. Every tensor of a converted model, in arena order: its
// canonical role (model/tensor_names.h gives the name), the Hugging Face tensors it is built from (the
// architecture's table, model/arch/), and the rule that slices it for each tp_rank (the parallel layout's
// ranges), including the layout transforms (GPT-NeoX QKV regrouping, q/k/v and gate/up fusion, KV-head
// replication, vocabulary padding). The converter writes exactly this; the loaders check shards against
// it (model/rank_shard.h); both backends bind it to typed per-layer views (model/model_tensors.h).
// Does not own: reading bytes or writing files.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "format/shard_file.h"
#include "model/model_config.h"
#include "model/parallel_layout.h"

namespace tpshard {

/// What a tensor is to the transformer; with a layer index it names the tensor (canonical_name) and
/// its split kind (role_split). One role per member of LayerTensors / ModelTensors (model_tensors.h).
enum class TensorRole {
  TokenEmbd,         ///< token_embd.weight      [vocab_rows, hidden]
  PosEmbd,           ///< position_embd.weight   [max_position_embeddings, hidden] (learned positions), replicated
  AttnNormWeight,    ///< blk.N.attn_norm.weight [hidden]
  AttnNormBias,      ///< blk.N.attn_norm.bias   [hidden] (LayerNorm)
  AttnQkvWeight,     ///< blk.N.attn_qkv.weight  [(heads + 2 kv_heads) head_dim, hidden]: Q | K | V rows
  AttnQkvBias,       ///< blk.N.attn_qkv.bias    [(heads + 2 kv_heads) head_dim]
  /// blk.N.attn_q_norm.weight, replicated: [head_dim], RMSNorm of each Q head before rotary (qk_norm, Qwen3);
  /// [heads head_dim], RMSNorm of the whole Q projection (qk_norm_across_heads, OLMo 2)
  AttnQNormWeight,
  AttnKNormWeight,   ///< blk.N.attn_k_norm.weight: the same for K ([head_dim] or [kv_heads head_dim])
  AttnOutputWeight,  ///< blk.N.attn_output.weight [hidden, heads head_dim] (row parallel)
  AttnOutputBias,    ///< blk.N.attn_output.bias [hidden], added once after the all_reduce
  FfnNormWeight,     ///< blk.N.ffn_norm.weight  [hidden]
  FfnNormBias,       ///< blk.N.ffn_norm.bias    [hidden] (LayerNorm)
  FfnGateUpWeight,   ///< blk.N.ffn_gate_up.weight [2 mlp_columns, hidden]: gate rows | up rows (gated MLP)
  FfnGateUpBias,     ///< blk.N.ffn_gate_up.bias [2 mlp_columns]
  FfnUpWeight,       ///< blk.N.ffn_up.weight    [mlp_columns, hidden] (non-gated MLP)
  FfnUpBias,         ///< blk.N.ffn_up.bias      [mlp_columns]
  FfnDownWeight,     ///< blk.N.ffn_down.weight  [hidden, mlp_columns] (row parallel)
  FfnDownBias,       ///< blk.N.ffn_down.bias    [hidden], added once after the all_reduce
  OutputNormWeight,  ///< output_norm.weight     [hidden]
  OutputNormBias,    ///< output_norm.bias       [hidden] (LayerNorm)
  Output,            ///< output.weight          [vocab_rows, hidden]; absent when tie_word_embeddings
  OutputBias,        ///< output.bias            [vocab_rows] (GPT-J's lm_head bias), added to the logits
  AttnPostNormWeight,  ///< blk.N.attn_post_norm.weight [hidden]: RMSNorm of the attention output before its residual add (post_norms), replicated
  FfnPostNormWeight,   ///< blk.N.ffn_post_norm.weight [hidden]: RMSNorm of the MLP output before its residual add (post_norms), replicated
  FfnRouterWeight,     ///< blk.N.ffn_router.weight [experts, hidden]: the mixture-of-experts router (num_local_experts), replicated
  /// blk.N.ffn_experts_gate_up.weight [experts 2 mlp_columns, hidden]: per expert e (in order) its gate
  /// rows then its up rows of the rank's mlp_columns (column parallel, like FfnGateUpWeight per expert)
  FfnExpertsGateUpWeight,
  /// blk.N.ffn_experts_down.weight [experts hidden, mlp_columns]: per expert its down projection's columns
  /// of the rank's mlp_columns (row parallel, like FfnDownWeight per expert)
  FfnExpertsDownWeight,
};

/// The shard-file name of a role (tensor_names.h); layer is ignored for the global roles.
std::string canonical_name(TensorRole role, int layer);
/// Column / Row / Vocab / Replicated, fixed by the role (Megatron-LM partitioning).
SplitKind role_split(TensorRole role);
/// Roles that belong to a layer (blk.N.*).
bool is_layer_role(TensorRole role);

/// How one output tensor is built from its sources. Sources are viewed as 2-D [rows, cols]
/// (1-D tensors as [n, 1]); rows of a 2-D weight are output features (nn.Linear layout).
enum class Transform {
  Replicate,  ///< the whole source on every rank
  RowsSplit,  ///< column parallel: the rank's mlp_columns rows of the source
  ColsSplit,  ///< row parallel: the rank's heads (attention) or mlp_columns (MLP) block of source columns
  VocabRows,  ///< the rank's vocab_rows; rows past vocab_size are zero (padding)
  NeoxQkv,    ///< GPT-NeoX query_key_value [heads*3*head_dim, hidden], per head (q,k,v) -> this rank's Q|K|V
  LlamaQkv,   ///< q_proj, k_proj, v_proj -> this rank's Q heads | K heads | V heads (KV heads replicated if needed)
  GateUp,     ///< gate_proj, up_proj -> this rank's gate rows | up rows
  /// One packed qkv [(heads + 2 kv_heads) head_dim, hidden] per KV group (InternLM2 wqkv): for each KV
  /// head g, its heads/kv_heads query heads, then its key head, then its value head -> this rank's
  /// Q heads | K heads | V heads (KV heads replicated if needed, like LlamaQkv).
  GroupedQkv,
  /// One fused qkv [(heads + 2 kv_heads) head_dim, hidden] as [all query heads | all key heads | all value
  /// heads] (Phi-3 qkv_proj) -> this rank's Q heads | K heads | V heads, like LlamaQkv.
  PackedQkv,
  /// One fused [2 intermediate, hidden] as [gate | up] (Phi-3 gate_up_proj) -> this rank's gate rows | up rows.
  PackedGateUp,
  /// q_proj, k_proj, v_proj as LlamaQkv, with the first rotary_ndims rows of each Q and K head reordered
  /// from GPT-J's interleaved rotary pairs (2j, 2j+1) to the half-split pairs (j, j + rotary_ndims/2) the
  /// backends rotate: new row j <- row 2j, new row rotary_ndims/2 + j <- row 2j + 1. The same order on Q
  /// and K leaves every score q.k unchanged (modeling_gptj.py rotate_every_two).
  GptjQkv,
  /// w1_0, w3_0, w1_1, w3_1, ... (gate and up of each of the E experts, each [intermediate, hidden]) ->
  /// for each expert, this rank's gate rows | up rows (GateUp per expert, experts stacked).
  ExpertsGateUp,
  /// w2_0, w2_1, ... (down of each expert, [hidden, intermediate]) -> for each expert, this rank's
  /// mlp_columns of its rows (ColsSplit per expert, experts stacked as rows).
  ExpertsDown,
};

/// One output tensor of every shard, in arena order.
struct OutputTensor {
  std::string name;                              ///< canonical_name(role, layer)
  TensorRole role = TensorRole::TokenEmbd;
  int layer = -1;                                ///< block index for layer roles, -1 otherwise
  std::vector<std::string> sources;              ///< Hugging Face names
  std::vector<std::vector<int64_t>> source_shapes;  ///< expected shape of each source (from config.json)
  SplitKind split = SplitKind::Replicated;       ///< role_split(role)
  Transform transform = Transform::Replicate;
};

/// Append one output tensor (name and split from the role): the building block of the architecture files.
void add_tensor(std::vector<OutputTensor>& plan, TensorRole role, int layer, std::vector<std::string> sources,
                std::vector<std::vector<int64_t>> source_shapes, Transform transform);

/// A run of `rows` consecutive source rows copied into the local tensor, each row taking
/// RankSlice::local_cols elements starting at col_begin. source == -1: zero rows (vocab padding).
struct Span {
  int source = -1;
  int64_t row_begin = 0;
  int64_t rows = 0;
  int64_t col_begin = 0;
};

/// What rank tp_rank stores for one output tensor.
struct RankSlice {
  std::vector<int64_t> global_shape;  ///< the unsplit shape (vocabulary padded)
  std::vector<int64_t> local_shape;
  int32_t split_axis = -1;
  int64_t local_cols = 1;             ///< elements per local row in the 2-D view
  std::vector<Span> spans;            ///< in output order; rows add up to the local row count
};

/// All output tensors of the model, in arena order (token_embd, position_embd, blocks 0..L-1, output_norm, output), from
/// the architecture's table (arch_spec(c.arch).plan_tensors).
std::vector<OutputTensor> plan_tensors(const ModelConfig& c);

/// Whether pp_stage of `layout` holds `t`: a layer's tensors on the stage of its layer, the others by
/// stage_holds_role (model/parallel_layout.h). With one stage, every tensor.
bool stage_holds(const OutputTensor& t, const ModelConfig& c, const ParallelLayout& layout, int pp_stage);

/// The slice of `t` held by tp_rank under `layout`.
RankSlice slice_for_rank(const OutputTensor& t, const ModelConfig& c, const ParallelLayout& layout, int tp_rank);

/// Source tensors that carry no weights the runtime needs and are skipped silently (rotary inv_freq
/// buffers, the architecture's own buffers, lm_head.weight of a tied model).
bool is_ignorable_source(const std::string& hf_name, const ModelConfig& c);

}  // namespace tpshard
