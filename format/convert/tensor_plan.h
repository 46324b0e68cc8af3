// tensor_plan.h: the explicit table Hugging Face tensor names -> tpshard tensor names (tensor_names.h)
// and the per-rank slicing rule of every output tensor, including the layout transforms (GPT-NeoX QKV
// regrouping, Llama q/k/v and gate/up fusion, KV-head replication, vocabulary padding).
// Does not own: reading bytes or writing files (convert.cpp).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "format/model_config.h"
#include "format/shard_file.h"

namespace tpshard {

/// How one output tensor is built from its sources. Sources are viewed as 2-D [rows, cols]
/// (1-D tensors as [n, 1]); rows of a 2-D weight are output features (nn.Linear layout).
enum class Transform {
  Replicate,  ///< the whole source on every rank
  RowsSplit,  ///< column parallel: contiguous block of source rows per rank
  ColsSplit,  ///< row parallel: contiguous block of source columns per rank
  VocabRows,  ///< rows split after padding the vocabulary to a multiple of tp_size with zero rows
  NeoxQkv,    ///< GPT-NeoX query_key_value [heads*3*head_dim, hidden], per head (q,k,v) -> this rank's Q|K|V
  LlamaQkv,   ///< q_proj, k_proj, v_proj -> this rank's Q heads | K heads | V heads (KV heads replicated if needed)
  GateUp,     ///< gate_proj, up_proj -> this rank's gate rows | up rows
};

/// One output tensor of every shard, in arena order.
struct OutputTensor {
  std::string name;                              ///< tensor_names.h name
  std::vector<std::string> sources;              ///< Hugging Face names
  std::vector<std::vector<int64_t>> source_shapes;  ///< expected shape of each source (from config.json)
  SplitKind split = SplitKind::Replicated;
  Transform transform = Transform::Replicate;
};

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
  std::vector<int64_t> global_shape;  ///< local_shape with split_axis multiplied by tp_size
  std::vector<int64_t> local_shape;
  int32_t split_axis = -1;
  int64_t local_cols = 1;             ///< elements per local row in the 2-D view
  std::vector<Span> spans;            ///< in output order; rows add up to the local row count
};

/// All output tensors of the model, in arena order (token_embd, blocks 0..L-1, output_norm, output).
std::vector<OutputTensor> plan_tensors(const ModelConfig& c);

/// The slice of `t` held by tp_rank under `layout`.
RankSlice slice_for_rank(const OutputTensor& t, const ModelConfig& c, const TpLayout& layout, int tp_rank);

/// Source tensors that carry no weights the runtime needs and are skipped silently (GPT-NeoX
/// rotary_emb.inv_freq and attention.bias / masked_bias buffers; lm_head.weight of a tied model).
bool is_ignorable_source(const std::string& hf_name, const ModelConfig& c);

}  // namespace tpshard
