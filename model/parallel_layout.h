// parallel_layout.h: every rank's place in a job and what it holds, in one type. A job is dp_size
// data-parallel replicas x pp_size pipeline stages x tp_size tensor-parallel ranks (world_size ranks,
// one process per GPU on the CUDA backend). Each stage holds a contiguous range of layers; inside a
// stage each tp_rank holds ranges of query heads, KV heads, MLP columns and vocabulary rows (Megatron-LM
// partitioning: column-parallel outputs and row-parallel inputs split by those ranges).
// Owns: all rank maths. Everything that needs "which rows are mine" asks this type, never size / tp.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model/model_config.h"

namespace tpshard {

/// Half-open range [begin, end) of global indices (heads, columns, rows, layers).
struct Range {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t size() const { return end - begin; }
  bool operator==(const Range& o) const { return begin == o.begin && end == o.end; }
};

/// What one tp_rank of a stage holds (global indices; the same on every stage and replica).
struct TpRankRanges {
  Range heads;        ///< query heads [0, num_attention_heads)
  Range kv_heads;     ///< KV heads [0, num_key_value_heads); several ranks share one when replicated
  Range mlp_columns;  ///< intermediate (MLP) columns [0, intermediate_size)
  Range vocab_rows;   ///< rows of the padded vocabulary [0, vocab_size_padded); rows >= vocab_size are zero
};

/// (dp_rank, pp_stage, tp_rank) of one world rank.
struct RankCoord {
  int dp_rank = 0;
  int pp_stage = 0;
  int tp_rank = 0;
};

/// The ranks of one job, without the model: dp_size data-parallel replicas x pp_size pipeline stages x
/// tp_size tensor-parallel ranks. world_rank = (dp_rank * pp_size + pp_stage) * tp_size + tp_rank: the
/// ranks of a tp group are consecutive (on one host for the launchers' usual placement), stages of one
/// replica next. Launchers and communicators use this before any model is read.
struct RankGrid {
  int dp_size = 1;
  int pp_size = 1;
  int tp_size = 1;

  int world_size() const { return dp_size * pp_size * tp_size; }
  /// Throws Error when world_rank is outside [0, world_size).
  RankCoord coord(int world_rank) const;
  /// Throws Error when a coordinate is outside its size.
  int world_rank(const RankCoord& c) const;
  /// World ranks of the tensor-parallel group of (dp_rank, pp_stage), ordered by tp_rank.
  std::vector<int> tp_group(int dp_rank, int pp_stage) const;
};

/// The layout of one job on one model: the grid, each stage's layers and each tp_rank's ranges.
struct ParallelLayout : RankGrid {
  int64_t vocab_size_padded = 0;        ///< sum of every tp_rank's vocab_rows
  bool kv_heads_replicated = false;     ///< some KV head lives on several ranks (the ranks hold more than num_key_value_heads)
  std::vector<Range> stage_layers;      ///< [pp_size]: the layers of each pp_stage, consecutive, covering all
  std::vector<TpRankRanges> tp_ranks;   ///< [tp_size]

  /// The ranges of tp_rank (Error when outside [0, tp_size)).
  const TpRankRanges& tp(int tp_rank) const;
  /// The largest per-rank count of each range over the tp ranks (what a buffer sized for any rank needs).
  TpRankRanges max_counts() const;
  /// The KV heads that tp_rank counts in a sum over the tp ranks: its kv_heads less those a lower rank
  /// also holds (replicated KV heads count once, on the lowest rank holding them). Over all ranks these
  /// ranges partition [0, num_key_value_heads). Error when tp_rank is outside [0, tp_size).
  Range owned_kv_heads(int tp_rank) const;
};

/// The largest tp_size make_parallel_layout accepts (tpshard convert --tp refuses larger values as usage errors).
constexpr int kMaxTpSize = 1024;

/// MLP column units: ranks' mlp_columns are whole multiples of a power of two from kMlpColumnVector
/// (the gemv's 16-byte vectors of f16/bf16; also keeps row-parallel weight rows 16-byte aligned) up to
/// kMlpColumnTile (whole 64-wide cuBLASLt tiles).
constexpr int64_t kMlpColumnVector = 8;
constexpr int64_t kMlpColumnTile = 64;

/// The unit of MLP columns at tp_size: intermediate_size / tp_size when that divides (the even split);
/// otherwise the largest power of two u <= kMlpColumnTile dividing
/// intermediate_size whose widest rank is no wider than with units of kMlpColumnVector (or of the
/// largest power of two below it that divides intermediate_size and leaves tp_size units).
int64_t mlp_column_unit(int64_t intermediate_size, int tp_size);

enum class TensorRole;  // model/tensor_plan.h

/// Whether a stage holds a model-level tensor of `role` (layer roles go with their layer): the token
/// (and position) embedding on the first stage, the final norm and LM head on the last, and with tied
/// embeddings token_embd on the last stage too (it is the LM head). A single stage is first and last.
bool stage_holds_role(TensorRole role, const ModelConfig& c, bool first_stage, bool last_stage);

/// Contiguous layer ranges for pp_size stages minimising the largest stage's elements, where stage 0
/// also carries first_elements (embeddings) and the last stage last_elements (final norm, LM head);
/// every stage holds at least one layer; among those, the one with the smallest sum of squared stage
/// sizes (the other stages balanced as well). Throws Error when pp_size is outside 1..layers.
std::vector<Range> balance_stages(const std::vector<uint64_t>& layer_elements, uint64_t first_elements,
                                  uint64_t last_elements, int pp_size);

/// Compute the layout. Any tp_size from 1 to num_attention_heads works (uneven tensor parallelism):
/// - query heads: contiguous, the first num_attention_heads % tp_size ranks one more (no rank holds more
///   than one head above another);
/// - KV heads: each rank holds the KV heads its query heads read, so a KV group split between two ranks
///   is held by both (replicated), and tp_size > num_key_value_heads replicates every KV head;
/// - MLP columns: whole units of mlp_column_unit, the first ranks one unit more;
/// - vocabulary: padded to a multiple of tp_size and split evenly (padding rows are zero);
/// - layers: contiguous per stage, balanced by bytes (balance_stages over the tensor plan's element
///   counts: the embedding counts on the first stage, the final norm and LM head on the last).
/// Throws Error naming the numbers and the largest tp_size the model accepts when tp_size is outside
/// 1..kMaxTpSize or a rank would hold no head, MLP column or vocabulary row; when pp_size is outside
/// 1..num_hidden_layers; or when dp_size < 1.
ParallelLayout make_parallel_layout(const ModelConfig& c, int tp_size, int pp_size = 1, int dp_size = 1);

}  // namespace tpshard
