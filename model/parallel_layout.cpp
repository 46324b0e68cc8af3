// parallel_layout.cpp: make_parallel_layout and the rank <-> coordinate maths (see parallel_layout.h).
#include "model/parallel_layout.h"

#include <algorithm>

#include "format/error.h"
#include "model/tensor_plan.h"

namespace tpshard {

namespace {

std::string s(int64_t v) { return std::to_string(v); }

/// Problem with this tp_size, or empty when it is usable: every rank needs at least one query head,
/// one MLP column unit and one vocabulary row.
std::string tp_problem(const ModelConfig& c, int tp) {
  if (c.num_attention_heads < tp)
    return "tp_size " + s(tp) + " is larger than num_attention_heads " + s(c.num_attention_heads) +
           " (a rank would hold no head)";
  if (c.intermediate_size < tp)
    return "tp_size " + s(tp) + " is larger than intermediate_size " + s(c.intermediate_size) +
           " (a rank would hold no MLP column)";
  if (c.vocab_size < tp)
    return "tp_size " + s(tp) + " is larger than vocab_size " + s(c.vocab_size) + " (a rank would hold no vocabulary row)";
  return {};
}

/// Range r of n items split into `parts` contiguous ranges, the first n % parts one larger.
Range even_part(int64_t n, int64_t parts, int64_t r) {
  const int64_t base = n / parts, extra = n % parts;
  const int64_t begin = r * base + std::min(r, extra);
  return {begin, begin + base + (r < extra ? 1 : 0)};
}

}  // namespace

bool stage_holds_role(TensorRole role, const ModelConfig& c, bool first_stage, bool last_stage) {
  switch (role) {
    case TensorRole::TokenEmbd:
      return first_stage || (last_stage && c.tie_word_embeddings);  // tied: the LM head too
    case TensorRole::PosEmbd:
      return first_stage;
    case TensorRole::OutputNormWeight:
    case TensorRole::OutputNormBias:
    case TensorRole::Output:
    case TensorRole::OutputBias:
      return last_stage;
    default:
      return false;  // layer roles go with their layer
  }
}

std::vector<Range> balance_stages(const std::vector<uint64_t>& layer_elements, uint64_t first_elements,
                                  uint64_t last_elements, int pp_size) {
  const int64_t L = static_cast<int64_t>(layer_elements.size());
  TPS_CHECK(pp_size >= 1 && pp_size <= L, "balance_stages: " + s(pp_size) + " stages for " + s(L) + " layers",
            "this is a bug in the caller");
  // Greedy fill under a bound is optimal for contiguous stages: each stage takes layers while it stays
  // within the bound and the later stages keep at least one layer each. Binary search on the bound.
  auto fill = [&](uint64_t bound, std::vector<Range>* out) {
    int64_t next = 0;
    for (int p = 0; p < pp_size; ++p) {
      uint64_t bytes = (p == 0 ? first_elements : 0) + (p == pp_size - 1 ? last_elements : 0);
      const int64_t begin = next;
      bytes += layer_elements[static_cast<size_t>(next++)];  // at least one layer
      if (p == pp_size - 1) {
        while (next < L) bytes += layer_elements[static_cast<size_t>(next++)];
      } else {
        const int64_t max_end = L - (pp_size - 1 - p);  // one layer left for each later stage
        while (next < max_end && bytes + layer_elements[static_cast<size_t>(next)] <= bound)
          bytes += layer_elements[static_cast<size_t>(next++)];
      }
      if (out) out->push_back({begin, next});
      if (bytes > bound) return false;
    }
    return true;
  };
  uint64_t lo = 0, hi = first_elements + last_elements;
  for (uint64_t e : layer_elements) hi += e;
  while (lo < hi) {
    const uint64_t mid = lo + (hi - lo) / 2;
    if (fill(mid, nullptr)) hi = mid;
    else lo = mid + 1;
  }
  std::vector<Range> stages;
  fill(lo, &stages);
  // Among the layouts whose largest stage is that bound, the one with the smallest sum of squared stage
  // sizes (the stages that do not set the bound balanced too): a DP over (stage, first layer of the next
  // stage), O(pp_size x layers^2), run when that is small enough (greedy fill otherwise).
  const double work = static_cast<double>(pp_size) * static_cast<double>(L) * static_cast<double>(L);
  if (pp_size > 2 && work <= 5e7) {
    std::vector<uint64_t> prefix(static_cast<size_t>(L) + 1, 0);
    for (int64_t i = 0; i < L; ++i) prefix[static_cast<size_t>(i) + 1] = prefix[static_cast<size_t>(i)] + layer_elements[static_cast<size_t>(i)];
    const double inf = 1e300;
    // best[p][j]: the least sum of squares of stages 0..p-1 covering layers [0, j); from[p][j]: where stage p-1 starts
    std::vector<std::vector<double>> best(static_cast<size_t>(pp_size) + 1, std::vector<double>(static_cast<size_t>(L) + 1, inf));
    std::vector<std::vector<int64_t>> from(static_cast<size_t>(pp_size) + 1, std::vector<int64_t>(static_cast<size_t>(L) + 1, -1));
    best[0][0] = 0;
    for (int p = 1; p <= pp_size; ++p)
      for (int64_t j = p; j <= L - (pp_size - p); ++j)
        for (int64_t i = p - 1; i < j; ++i) {
          if (best[static_cast<size_t>(p - 1)][static_cast<size_t>(i)] >= inf) continue;
          const uint64_t bytes = prefix[static_cast<size_t>(j)] - prefix[static_cast<size_t>(i)] + (p == 1 ? first_elements : 0) +
                                 (p == pp_size ? last_elements : 0);
          if (bytes > lo) continue;
          const double cost = best[static_cast<size_t>(p - 1)][static_cast<size_t>(i)] + static_cast<double>(bytes) * static_cast<double>(bytes);
          if (cost < best[static_cast<size_t>(p)][static_cast<size_t>(j)]) {
            best[static_cast<size_t>(p)][static_cast<size_t>(j)] = cost;
            from[static_cast<size_t>(p)][static_cast<size_t>(j)] = i;
          }
        }
    if (best[static_cast<size_t>(pp_size)][static_cast<size_t>(L)] < inf) {
      int64_t j = L;
      for (int p = pp_size; p >= 1; --p) {
        const int64_t i = from[static_cast<size_t>(p)][static_cast<size_t>(j)];
        stages[static_cast<size_t>(p - 1)] = {i, j};
        j = i;
      }
    }
  }
  return stages;
}

int64_t mlp_column_unit(int64_t intermediate_size, int tp_size) {
  if (intermediate_size % tp_size == 0) return intermediate_size / tp_size;  // even: one unit per rank
  auto widest = [&](int64_t u) { return (intermediate_size / u + tp_size - 1) / tp_size * u; };
  int64_t base = 1;  // the kernels' vector width, or the largest power of two dividing intermediate_size below it
  while (base < kMlpColumnVector && intermediate_size % (2 * base) == 0 && intermediate_size / (2 * base) >= tp_size) base *= 2;
  for (int64_t u = kMlpColumnTile; u > base; u /= 2)
    if (intermediate_size % u == 0 && intermediate_size / u >= tp_size && widest(u) == widest(base)) return u;
  return base;
}

RankCoord RankGrid::coord(int world_rank) const {
  TPS_CHECK(world_rank >= 0 && world_rank < world_size(),
            "world rank " + s(world_rank) + " is outside the job's " + s(world_size()) + " ranks",
            "start as many ranks as dp_size x pp_size x tp_size");
  RankCoord c;
  c.tp_rank = world_rank % tp_size;
  c.pp_stage = (world_rank / tp_size) % pp_size;
  c.dp_rank = world_rank / (tp_size * pp_size);
  return c;
}

int RankGrid::world_rank(const RankCoord& c) const {
  TPS_CHECK(c.dp_rank >= 0 && c.dp_rank < dp_size && c.pp_stage >= 0 && c.pp_stage < pp_size && c.tp_rank >= 0 &&
                c.tp_rank < tp_size,
            "rank (dp " + s(c.dp_rank) + ", pp " + s(c.pp_stage) + ", tp " + s(c.tp_rank) + ") is outside the layout (" +
                s(dp_size) + " x " + s(pp_size) + " x " + s(tp_size) + ")",
            "this is a bug in the caller");
  return (c.dp_rank * pp_size + c.pp_stage) * tp_size + c.tp_rank;
}

std::vector<int> RankGrid::tp_group(int dp_rank, int pp_stage) const {
  std::vector<int> g;
  for (int t = 0; t < tp_size; ++t) g.push_back(world_rank({dp_rank, pp_stage, t}));
  return g;
}

const TpRankRanges& ParallelLayout::tp(int tp_rank) const {
  TPS_CHECK(tp_rank >= 0 && tp_rank < tp_size, "tp_rank " + s(tp_rank) + " is outside tp_size " + s(tp_size),
            "this is a bug in the caller");
  return tp_ranks[static_cast<size_t>(tp_rank)];
}

Range ParallelLayout::owned_kv_heads(int tp_rank) const {
  const Range kv = tp(tp_rank).kv_heads;
  const int64_t prev_end = tp_rank > 0 ? tp(tp_rank - 1).kv_heads.end : 0;  // KV ranges ascend with tp_rank
  const int64_t begin = std::min(kv.end, std::max(kv.begin, prev_end));
  return {begin, kv.end};
}

TpRankRanges ParallelLayout::max_counts() const {
  TpRankRanges m;
  for (const TpRankRanges& r : tp_ranks) {
    m.heads.end = std::max(m.heads.end, r.heads.size());
    m.kv_heads.end = std::max(m.kv_heads.end, r.kv_heads.size());
    m.mlp_columns.end = std::max(m.mlp_columns.end, r.mlp_columns.size());
    m.vocab_rows.end = std::max(m.vocab_rows.end, r.vocab_rows.size());
  }
  return m;
}

ParallelLayout make_parallel_layout(const ModelConfig& c, int tp_size, int pp_size, int dp_size) {
  if (tp_size < 1 || tp_size > kMaxTpSize)
    throw Error("tp_size " + s(tp_size) + " is out of range", "use a tp_size between 1 and " + s(kMaxTpSize));
  const std::string problem = tp_problem(c, tp_size);
  if (!problem.empty()) {
    int largest = 1;
    for (int t = 1; t <= kMaxTpSize; ++t)
      if (tp_problem(c, t).empty()) largest = t;
    throw Error(c.architecture + " (" + s(c.num_attention_heads) + " heads, " + s(c.num_key_value_heads) +
                    " KV heads): " + problem,
                "use a tp_size between 1 and " + s(largest) + ", the largest this model accepts");
  }
  TPS_CHECK(pp_size >= 1 && pp_size <= c.num_hidden_layers,
            "pp_size " + s(pp_size) + ": the model has " + s(c.num_hidden_layers) + " layers",
            "use a pp_size between 1 and " + s(c.num_hidden_layers) + " (each stage holds at least one layer)");
  TPS_CHECK(dp_size >= 1, "dp_size " + s(dp_size) + " is not positive", "use a dp_size of 1 or more");
  ParallelLayout l;
  l.dp_size = dp_size;
  l.pp_size = pp_size;
  l.tp_size = tp_size;
  l.vocab_size_padded = (c.vocab_size + tp_size - 1) / tp_size * tp_size;
  if (pp_size == 1) {
    l.stage_layers.push_back({0, c.num_hidden_layers});
  } else {
    std::vector<uint64_t> layer(static_cast<size_t>(c.num_hidden_layers), 0);
    uint64_t first = 0, last = 0;
    for (const OutputTensor& t : plan_tensors(c)) {
      uint64_t n = 0;  // every source (q, k, v; gate, up) of the tensor
      for (const auto& sh : t.source_shapes) {
        uint64_t k = 1;
        for (int64_t d : sh) k *= static_cast<uint64_t>(d);
        n += k;
      }
      if (t.layer >= 0) layer[static_cast<size_t>(t.layer)] += n;
      if (stage_holds_role(t.role, c, /*first=*/true, /*last=*/false)) first += n;
      if (stage_holds_role(t.role, c, /*first=*/false, /*last=*/true)) last += n;
    }
    l.stage_layers = balance_stages(layer, first, last, pp_size);
  }
  const int64_t group = c.num_attention_heads / c.num_key_value_heads;  // query heads per KV head
  const int64_t unit = mlp_column_unit(c.intermediate_size, tp_size), units = c.intermediate_size / unit;
  const int64_t vpr = l.vocab_size_padded / tp_size;
  int64_t kv_copies = 0;
  for (int r = 0; r < tp_size; ++r) {
    TpRankRanges t;
    t.heads = even_part(c.num_attention_heads, tp_size, r);
    // The KV heads this rank's query heads read: a KV group split between ranks is held by each.
    t.kv_heads = {t.heads.begin / group, (t.heads.end - 1) / group + 1};
    kv_copies += t.kv_heads.size();
    const Range u = even_part(units, tp_size, r);
    t.mlp_columns = {u.begin * unit, u.end * unit};
    t.vocab_rows = {r * vpr, (r + 1) * vpr};
    l.tp_ranks.push_back(t);
  }
  l.kv_heads_replicated = kv_copies > c.num_key_value_heads;
  return l;
}

}  // namespace tpshard
