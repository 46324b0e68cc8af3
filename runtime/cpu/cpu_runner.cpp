// cpu_runner.cpp: the fp32 transformer forward pass of the CPU backend (Megatron tensor parallelism):
// vocab-parallel embedding (+ all_reduce, + learned position embedding), per block: norm -> column-parallel
// QKV -> rotary (unless learned positions) -> causal attention over the kv_cache (windowed on local layers) -> row-parallel output (+ all_reduce, bias once) and the MLP likewise,
// GPT-NeoX parallel or sequential residual; final norm -> vocab-parallel logits -> all_gather.
// Gemma 2 (modeling_gemma2.py): embeddings scaled, RMSNorm x (1 + w), the attention and MLP outputs
// normalized before their residual adds (post_norms), attention scores and final logits soft-capped.
// OLMo 2 (modeling_olmo2.py): no pre-norms (pre_norms false), post_norms, and q/k RMSNorms over the whole
// projection (qk_norm_across_heads: each token's sum of squares all_reduced over the tp ranks). Mixtral
// (modeling_mixtral.py): the MLP is a mixture of experts (num_local_experts): the replicated router picks
// each token's experts; each expert runs once over its tokens on the rank's mlp_columns; one all_reduce.
// References: transformers' modeling_gpt_neox.py, modeling_llama.py, modeling_gpt_neo.py, modeling_gemma2.py,
// modeling_olmo2.py and modeling_mixtral.py.
// kv_cache: a global layer keeps max_seq_len positions per slot, a local (windowed) layer a ring of
// kv_cache_positions() (model/kv_ring.h; chunks longer than one step allows run in rounds,
// runtime/chunk_rounds.h); a chunk with a shared prefix reads the prefix's positions from the prefix's
// slot (SeqChunk::prefix_slot).
// Pipeline parallelism (CpuRunnerOptions::link): the runner holds one stage's layers; forward() splits
// the chunks into micro-batches that flow stage to stage (hidden states over the StageLink), the last
// stage computes the logits and shares them with the other stages.
#include "runtime/cpu/cpu_runner.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cmath>
#include <cstring>
#include <string>

#include "format/error.h"
#include "model/kv_ring.h"
#include "model/moe_routing.h"
#include "model/parallel_layout.h"
#include "runtime/chunk_rounds.h"
#include "runtime/cpu/ops.h"
#include "runtime/rope.h"

namespace tpshard::cpu {

namespace {

class CpuRunner final : public ModelRunner {
 public:
  CpuRunner(const ModelConfig& c, ModelWeights w, Communicator& comm, ThreadPool& pool, const CpuRunnerOptions& o)
      : config_(c),
        layout_(make_parallel_layout(c, comm.size(), o.link ? o.link->pp_size() : 1)),
        mine_(layout_.tp(comm.rank())),
        w_(std::move(w)),
        comm_(comm),
        pool_(pool),
        link_(o.link),
        stage_(layout_.stage_layers[static_cast<size_t>(o.link ? o.link->pp_stage() : 0)]),
        micro_batches_(o.micro_batches > 0 ? o.micro_batches : 2 * layout_.pp_size),
        max_batch_(o.max_batch),
        max_seq_len_(o.max_seq_len),
        inv_freq_(rope_inv_freq(c)),
    owned_kv_(layout_.owned_kv_heads(comm.rank())) {
    TPS_CHECK(max_batch_ >= 1, "cpu runner: max_batch " + std::to_string(max_batch_) + " must be >= 1",
              "pass --max-batch 1 or more");
    TPS_CHECK(max_seq_len_ >= 1, "cpu runner: max_seq_len " + std::to_string(max_seq_len_) + " must be >= 1",
              "pass --max-seq-len 1 or more");
    kv_heads_ = mine_.kv_heads.size();
    first_kv_head_ = mine_.kv_heads.begin;
    max_step_positions_ = max_step_positions(c, max_seq_len_);
    k_cache_.resize(static_cast<size_t>(c.num_hidden_layers));
    v_cache_.resize(static_cast<size_t>(c.num_hidden_layers));
    cache_positions_.assign(static_cast<size_t>(c.num_hidden_layers), 0);
    for (int64_t l = stage_.begin; l < stage_.end; ++l) {  // this stage's layers only
      const int64_t positions = kv_cache_positions(c, l, max_seq_len_);
      const size_t floats = static_cast<size_t>(max_batch_) * kv_heads_ * positions * c.head_dim;
      cache_positions_[static_cast<size_t>(l)] = static_cast<int>(positions);
      cache_floats_ += floats;
      // new float[] leaves pages untouched until a slot/position is written.
      k_cache_[static_cast<size_t>(l)].reset(new float[floats]);
      v_cache_[static_cast<size_t>(l)].reset(new float[floats]);
    }
  }

  const ModelConfig& config() const override { return config_; }
  int max_batch() const override { return max_batch_; }
  int max_seq_len() const override { return max_seq_len_; }
  uint64_t weight_bytes() const override { return w_.bytes; }
  uint64_t kv_cache_bytes() const override {
    return 2 * cache_floats_ * sizeof(float);
  }

  void forward(const std::vector<SeqChunk>& chunks, float* logits, int32_t* argmax) override;
  std::string pipeline_report() const override {
    return link_ ? pipeline_report_line(link_->pp_stage(), stage_, forward_s_, wait_s_) : std::string();
  }

 private:
  struct TokenInfo {
    int32_t id;
    int pos;
    int slot;
    int prefix_slot;  ///< shared prefix (SeqChunk::prefix_slot), -1: none
    int prefix_len;
  };
  void check_chunks(const std::vector<SeqChunk>& chunks) const;
  /// The chunks' tokens in order; last_row gets the row of each output (each chunk's last token, every
  /// token of an all_logits chunk).
  static std::vector<TokenInfo> tokens_of(const std::vector<SeqChunk>& chunks, std::vector<int64_t>* last_row);
  /// The stage's layers over x [toks, hidden] in place.
  void run_layers(const std::vector<TokenInfo>& toks, std::vector<float>& x);
  /// Final norm and vocab-parallel logits of the rows last_row of x: logits [m, vocab] / argmax [m].
  void head(const std::vector<int64_t>& last_row, const float* x, float* logits, int32_t* argmax);
  /// forward() of one micro-batch at a time through the stages (pp_size > 1).
  void forward_pipeline(const std::vector<SeqChunk>& chunks, float* logits, int32_t* argmax);
  void embed(const std::vector<TokenInfo>& toks, float* x);
  void attention_block(int layer, const std::vector<TokenInfo>& toks, const float* h, float* out);
  void mlp_block(int layer, const float* h, float* out, int64_t n_tokens);
  /// The mixture-of-experts MLP (num_local_experts > 0) of h [n, hidden] into out [n, hidden], before the
  /// all_reduce: the rank's mlp_columns of every routed expert, weighted by the routing weights.
  void moe_block(int layer, const float* h, float* out, int64_t n_tokens);
  /// qk_norm_across_heads: RMSNorm of each token's whole Q and whole K (all ranks' heads) in qkv [n,
  /// qkv_cols] (the rank's Q heads, then its K heads), in place.
  void qk_norm_across_heads(int layer, float* qkv, int64_t n, int64_t qkv_cols);
  /// Index of position pos in layer's cache rows (pos itself, or pos % capacity on a ring).
  size_t cache_row(int layer, int slot, int64_t kvh, int pos) const {
    const int n = cache_positions_[static_cast<size_t>(layer)];
    return (static_cast<size_t>(slot) * kv_heads_ + kvh) * n + static_cast<size_t>(pos % n);
  }
  float* k_at(int layer, int slot, int64_t kvh, int pos) {
    return k_cache_[layer].get() + cache_row(layer, slot, kvh, pos) * config_.head_dim;
  }
  float* v_at(int layer, int slot, int64_t kvh, int pos) {
    return v_cache_[layer].get() + cache_row(layer, slot, kvh, pos) * config_.head_dim;
  }
  /// Append to spans the positions [begin, end) of slot's cache, as one span or two where the ring wraps.
  void add_spans(int layer, int slot, int64_t kvh, int begin, int end, KvSpan* spans, int* n_spans) {
    const int n = cache_positions_[static_cast<size_t>(layer)];
    while (begin < end) {
      const int run = std::min(end - begin, n - begin % n);  // up to the end of the ring
      spans[(*n_spans)++] = {k_at(layer, slot, kvh, begin), v_at(layer, slot, kvh, begin), run};
      begin += run;
    }
  }
  void norm(const std::vector<float>& w, const std::vector<float>& b, const float* x, float* y, int64_t n) const {
    if (config_.norm == NormKind::LayerNorm)
      layer_norm(x, w.data(), b.empty() ? nullptr : b.data(), y, n, config_.hidden_size, config_.norm_eps);
    else
      rms_norm(x, w.data(), y, n, config_.hidden_size, config_.norm_eps, static_cast<float>(config_.norm_weight_offset));
  }
  static const float* opt(const std::vector<float>& v) { return v.empty() ? nullptr : v.data(); }

  ModelConfig config_;
  ParallelLayout layout_;
  TpRankRanges mine_;  ///< this tp_rank's ranges
  ModelWeights w_;
  Communicator& comm_;
  ThreadPool& pool_;
  StageLink* link_;  ///< nullptr: one stage
  Range stage_;      ///< this stage's layers
  int micro_batches_;
  double forward_s_ = 0, wait_s_ = 0;  ///< pipeline: time in forward(), and in it waiting for other stages
  int max_batch_, max_seq_len_;
  std::vector<float> inv_freq_;
  Range owned_kv_;  ///< the KV heads this rank counts in sums over ranks (ParallelLayout::owned_kv_heads)
  int64_t kv_heads_ = 0, first_kv_head_ = 0;
  size_t cache_floats_ = 0;            ///< floats of this stage's K (or V) caches, all layers
  int64_t max_step_positions_ = 0;     ///< model/kv_ring.h: longest piece of a chunk one step takes
  std::vector<int> cache_positions_;   ///< per layer: positions per slot (kv_ring.h), 0 outside the stage
  std::vector<std::unique_ptr<float[]>> k_cache_, v_cache_;  ///< per layer [max_batch, kv_heads_per_rank, positions, head_dim]
};

void CpuRunner::check_chunks(const std::vector<SeqChunk>& chunks) const {
  TPS_CHECK(!chunks.empty(), "cpu runner: forward() called with no chunks", "this is a bug in the caller");
  for (const SeqChunk& ch : chunks) {
    TPS_CHECK(ch.slot >= 0 && ch.slot < max_batch_,
              "cpu runner: kv_cache slot " + std::to_string(ch.slot) + " outside [0, " + std::to_string(max_batch_) + ")",
              "raise --max-batch");
    TPS_CHECK(!ch.tokens.empty(), "cpu runner: a chunk has no tokens", "this is a bug in the caller");
    const int64_t end = static_cast<int64_t>(ch.start_pos) + static_cast<int64_t>(ch.tokens.size());
    TPS_CHECK(ch.start_pos >= 0 && end <= max_seq_len_,
              "cpu runner: sequence of " + std::to_string(end) + " tokens exceeds max_seq_len " +
                  std::to_string(max_seq_len_),
              "raise --max-seq-len or shorten the prompt / --max-new-tokens");
    TPS_CHECK(ch.prefix_slot < 0 || (ch.prefix_slot < max_batch_ && ch.prefix_slot != ch.slot &&
                                      ch.prefix_len >= 0 && ch.prefix_len <= ch.start_pos),
              "cpu runner: shared prefix (slot " + std::to_string(ch.prefix_slot) + ", " +
                  std::to_string(ch.prefix_len) + " positions) invalid for a chunk of slot " + std::to_string(ch.slot) +
                  " at position " + std::to_string(ch.start_pos),
              "this is a bug in the caller");
    for (int32_t id : ch.tokens)
      TPS_CHECK(id >= 0 && id < config_.vocab_size,
                "cpu runner: token id " + std::to_string(id) + " outside the vocabulary [0, " +
                    std::to_string(config_.vocab_size) + ")",
                "check the token ids given to the model");
  }
}

void CpuRunner::embed(const std::vector<TokenInfo>& toks, float* x) {
  const int64_t H = config_.hidden_size, vpr = mine_.vocab_rows.size();
  const int64_t first = mine_.vocab_rows.begin;
  for (size_t t = 0; t < toks.size(); ++t) {
    const int64_t local = toks[t].id - first;
    float* row = x + t * H;
    if (local >= 0 && local < vpr)
      std::memcpy(row, w_.token_embd.data() + local * H, H * sizeof(float));
    else
      std::fill(row, row + H, 0.0f);
  }
  // Exactly one rank holds each row: the sum is exact.
  comm_.all_reduce_sum(x, toks.size() * H, DType::F32);
  if (config_.embedding_scale != 1.0) {  // Gemma: embeddings * sqrt(hidden_size) as f32 (the activation dtype)
    const float scale = static_cast<float>(config_.embedding_scale);
    for (size_t i = 0; i < toks.size() * H; ++i) x[i] *= scale;
  }
  if (!w_.position_embd.empty())  // learned positions (replicated table): inputs_embeds + position_embeds
    for (size_t t = 0; t < toks.size(); ++t) {
      const float* pe = w_.position_embd.data() + static_cast<int64_t>(toks[t].pos) * H;
      for (int64_t i = 0; i < H; ++i) x[t * H + i] += pe[i];
    }
}

void CpuRunner::attention_block(int layer, const std::vector<TokenInfo>& toks, const float* h, float* out) {
  const LayerWeights& lw = w_.layers[layer];
  const int64_t H = config_.hidden_size, hd = config_.head_dim;
  const int64_t hpr = mine_.heads.size();
  const int64_t qkv_cols = (hpr + 2 * kv_heads_) * hd;
  const int64_t n = static_cast<int64_t>(toks.size());
  std::vector<float> qkv(n * qkv_cols);
  linear(pool_, h, lw.attn_qkv_weight.data(), opt(lw.attn_qkv_bias), qkv.data(), n, H, qkv_cols);

  // (Qwen3) RMSNorm of each Q and K head, (OLMo 2) of the whole Q and K, then rotary on them, then
  // append K/V to the kv_cache.
  if (config_.qk_norm_across_heads) qk_norm_across_heads(layer, qkv.data(), n, qkv_cols);
  for (int64_t t = 0; t < n; ++t) {
    float* row = qkv.data() + t * qkv_cols;
    if (config_.qk_norm) {  // each head is a row of head_dim: Q heads, then K heads
      rms_norm(row, lw.attn_q_norm_weight.data(), row, hpr, hd, config_.norm_eps);
      rms_norm(row + hpr * hd, lw.attn_k_norm_weight.data(), row + hpr * hd, kv_heads_, hd, config_.norm_eps);
    }
    for (int64_t j = 0; j < hpr + kv_heads_; ++j)
      apply_rotary(row + j * hd, toks[t].pos, inv_freq_, static_cast<float>(config_.rope_attention_factor));
    for (int64_t j = 0; j < kv_heads_; ++j) {
      std::memcpy(k_at(layer, toks[t].slot, j, toks[t].pos), row + (hpr + j) * hd, hd * sizeof(float));
      std::memcpy(v_at(layer, toks[t].slot, j, toks[t].pos), row + (hpr + kv_heads_ + j) * hd, hd * sizeof(float));
    }
  }

  // Causal attention: the query at position p sees positions 0..p of its own slot; on a local layer of
  // window w only p - w < j <= p (transformers' GPT-Neo local mask and sliding_window_overlay alike).
  // With a shared prefix of length P, positions j < P are read from the prefix's slot.
  const int64_t group = config_.num_attention_heads / config_.num_key_value_heads;
  const int64_t first_head = mine_.heads.begin;
  const int64_t window = config_.layer_windows.empty() ? 0 : config_.layer_windows[layer];
  const float scale = config_.attention_scale > 0 ? static_cast<float>(config_.attention_scale)
                                                  : 1.0f / std::sqrt(static_cast<float>(hd));
  const float cap = static_cast<float>(config_.attn_logit_softcapping);  // 0: none
  std::vector<float> attn(n * hpr * hd);
  pool_.parallel_for(n * hpr, [&](int64_t b, int64_t e) {
    std::vector<float> scores(max_seq_len_);
    for (int64_t i = b; i < e; ++i) {
      const int64_t t = i / hpr, j = i % hpr;
      const TokenInfo& tk = toks[t];
      const int64_t kvh = (first_head + j) / group - first_kv_head_;
      const float* q = qkv.data() + t * qkv_cols + j * hd;
      const int first = window > 0 ? static_cast<int>(std::max<int64_t>(0, tk.pos + 1 - window)) : 0;
      const int end = tk.pos + 1;
      const int split = tk.prefix_slot >= 0 ? std::clamp(tk.prefix_len, first, end) : first;  // [first, split): prefix
      KvSpan spans[4];  // prefix, own positions: each one span, or two where a ring wraps
      int n_spans = 0;
      if (split > first) add_spans(layer, tk.prefix_slot, kvh, first, split, spans, &n_spans);
      if (end > split) add_spans(layer, tk.slot, kvh, split, end, spans, &n_spans);
      attention_head(q, spans, n_spans, hd, scale, attn.data() + (t * hpr + j) * hd, scores.data(), cap);
    }
  });

  // Row-parallel output projection: partial sums, all_reduce, then the bias once.
  linear(pool_, attn.data(), lw.attn_output_weight.data(), nullptr, out, n, hpr * hd, H);
  comm_.all_reduce_sum(out, n * H, DType::F32);
  if (!lw.attn_output_bias.empty())
    for (int64_t t = 0; t < n; ++t)
      for (int64_t i = 0; i < H; ++i) out[t * H + i] += lw.attn_output_bias[i];
}

void CpuRunner::qk_norm_across_heads(int layer, float* qkv, int64_t n, int64_t qkv_cols) {
  const LayerWeights& lw = w_.layers[layer];
  const int64_t hd = config_.head_dim, hpr = mine_.heads.size();
  // Per token: sum of squares of the rank's Q values and of its owned K heads' values; summed over ranks
  // they are the whole projection's (each KV head counted once).
  std::vector<float> sums(2 * n);
  for (int64_t t = 0; t < n; ++t) {
    const float* row = qkv + t * qkv_cols;
    float sq = 0.0f, sk = 0.0f;
    for (int64_t i = 0; i < hpr * hd; ++i) sq += row[i] * row[i];
    const float* k_owned = row + (hpr + owned_kv_.begin - first_kv_head_) * hd;
    for (int64_t i = 0; i < owned_kv_.size() * hd; ++i) sk += k_owned[i] * k_owned[i];
    sums[2 * t] = sq;
    sums[2 * t + 1] = sk;
  }
  comm_.all_reduce_sum(sums.data(), sums.size(), DType::F32);
  const float eps = static_cast<float>(config_.norm_eps);
  const float q_n = static_cast<float>(config_.num_attention_heads * hd), k_n = static_cast<float>(config_.num_key_value_heads * hd);
  const float* wq = lw.attn_q_norm_weight.data() + mine_.heads.begin * hd;  // the rank's part of the whole weight
  const float* wk = lw.attn_k_norm_weight.data() + first_kv_head_ * hd;
  for (int64_t t = 0; t < n; ++t) {
    float* row = qkv + t * qkv_cols;
    const float rq = 1.0f / std::sqrt(sums[2 * t] / q_n + eps), rk = 1.0f / std::sqrt(sums[2 * t + 1] / k_n + eps);
    for (int64_t i = 0; i < hpr * hd; ++i) row[i] = wq[i] * (row[i] * rq);
    for (int64_t i = 0; i < kv_heads_ * hd; ++i) row[hpr * hd + i] = wk[i] * (row[hpr * hd + i] * rk);
  }
}

void CpuRunner::moe_block(int layer, const float* h, float* out, int64_t n) {
  const LayerWeights& lw = w_.layers[layer];
  const int64_t H = config_.hidden_size, ipr = mine_.mlp_columns.size();
  const int64_t E = config_.num_local_experts, K = config_.num_experts_per_tok;
  // Router (replicated: every rank routes alike), then each token's top-k experts and weights.
  std::vector<float> router(n * E);
  linear(pool_, h, lw.ffn_router_weight.data(), nullptr, router.data(), n, H, E);
  std::vector<int32_t> ids(n * K);
  std::vector<float> weights(n * K);
  for (int64_t t = 0; t < n; ++t) route_top_k(router.data() + t * E, E, K, ids.data() + t * K, weights.data() + t * K);
  std::fill(out, out + n * H, 0.0f);
  // The entries grouped by expert (model/moe_routing.h, the permutation the CUDA kernels build); each
  // expert once over its tokens (rows gathered), its output added with the weights, experts in id order.
  const MoePermutation perm = moe_permutation(ids.data(), n * K, E);
  std::vector<int64_t> entry_of_slot(static_cast<size_t>(perm.offsets[E]), -1);
  for (int64_t i = 0; i < n * K; ++i) entry_of_slot[perm.slots[i]] = i;
  std::vector<float> x, gate_up, act, y;
  for (int64_t e = 0; e < E; ++e) {
    const int64_t m = perm.counts[e];
    if (m == 0) continue;
    const int64_t* entry = entry_of_slot.data() + perm.offsets[e];
    x.resize(m * H);
    gate_up.resize(m * 2 * ipr);
    act.resize(m * ipr);
    y.resize(m * H);
    for (int64_t r = 0; r < m; ++r) std::memcpy(x.data() + r * H, h + entry[r] / K * H, H * sizeof(float));
    linear(pool_, x.data(), lw.ffn_experts_gate_up_weight.data() + e * 2 * ipr * H, nullptr, gate_up.data(), m, H, 2 * ipr);
    gated_activation(config_.hidden_act, gate_up.data(), act.data(), m, ipr);
    linear(pool_, act.data(), lw.ffn_experts_down_weight.data() + e * H * ipr, nullptr, y.data(), m, ipr, H);
    for (int64_t r = 0; r < m; ++r)
      for (int64_t i = 0; i < H; ++i) out[entry[r] / K * H + i] += weights[entry[r]] * y[r * H + i];
  }
}

void CpuRunner::mlp_block(int layer, const float* h, float* out, int64_t n) {
  const LayerWeights& lw = w_.layers[layer];
  const int64_t H = config_.hidden_size, ipr = mine_.mlp_columns.size();
  if (config_.num_local_experts > 0) {  // Mixtral: experts summed on the rank, then one all_reduce
    moe_block(layer, h, out, n);
    comm_.all_reduce_sum(out, n * H, DType::F32);
    return;
  }
  std::vector<float> act(n * ipr);
  if (config_.gated_mlp) {
    std::vector<float> gate_up(n * 2 * ipr);
    linear(pool_, h, lw.ffn_gate_up_weight.data(), opt(lw.ffn_gate_up_bias), gate_up.data(), n, H, 2 * ipr);
    gated_activation(config_.hidden_act, gate_up.data(), act.data(), n, ipr);
  } else {
    linear(pool_, h, lw.ffn_up_weight.data(), opt(lw.ffn_up_bias), act.data(), n, H, ipr);
    activation(config_.hidden_act, act.data(), n * ipr);
  }
  linear(pool_, act.data(), lw.ffn_down_weight.data(), nullptr, out, n, ipr, H);
  comm_.all_reduce_sum(out, n * H, DType::F32);
  if (!lw.ffn_down_bias.empty())
    for (int64_t t = 0; t < n; ++t)
      for (int64_t i = 0; i < H; ++i) out[t * H + i] += lw.ffn_down_bias[i];
}

std::vector<CpuRunner::TokenInfo> CpuRunner::tokens_of(const std::vector<SeqChunk>& chunks, std::vector<int64_t>* last_row) {
  std::vector<CpuRunner::TokenInfo> toks;
  for (const SeqChunk& ch : chunks) {
    for (size_t i = 0; i < ch.tokens.size(); ++i)
    {
      toks.push_back({ch.tokens[i], ch.start_pos + static_cast<int>(i), ch.slot, ch.prefix_slot, ch.prefix_len});
      if (ch.all_logits) last_row->push_back(static_cast<int64_t>(toks.size()) - 1);
    }
    if (!ch.all_logits) last_row->push_back(static_cast<int64_t>(toks.size()) - 1);
  }
  return toks;
}

void CpuRunner::run_layers(const std::vector<TokenInfo>& toks, std::vector<float>& x) {
  const int64_t n = static_cast<int64_t>(toks.size()), H = config_.hidden_size;
  std::vector<float> h(n * H), attn_out(n * H), mlp_out(n * H);
  for (int layer = static_cast<int>(stage_.begin); layer < static_cast<int>(stage_.end); ++layer) {
    const LayerWeights& lw = w_.layers[layer];
    // OLMo 2 (no pre_norms): the blocks read the residual stream itself
    const float* attn_in = x.data();
    if (config_.pre_norms) {
      norm(lw.attn_norm_weight, lw.attn_norm_bias, x.data(), h.data(), n);
      attn_in = h.data();
    }
    attention_block(layer, toks, attn_in, attn_out.data());
    if (config_.use_parallel_residual) {
      // GPT-NeoX: x + attn(ln1(x)) + mlp(ln2(x))
      norm(lw.ffn_norm_weight, lw.ffn_norm_bias, x.data(), h.data(), n);
      mlp_block(layer, h.data(), mlp_out.data(), n);
      for (int64_t i = 0; i < n * H; ++i) x[i] = mlp_out[i] + attn_out[i] + x[i];
    } else {
      // Gemma 2, OLMo 2 (post_norms): x + post_attention_norm(attn), then x + post_feedforward_norm(mlp)
      if (config_.post_norms) norm(lw.attn_post_norm_weight, {}, attn_out.data(), attn_out.data(), n);
      for (int64_t i = 0; i < n * H; ++i) x[i] += attn_out[i];
      const float* mlp_in = x.data();
      if (config_.pre_norms) {
        norm(lw.ffn_norm_weight, lw.ffn_norm_bias, x.data(), h.data(), n);
        mlp_in = h.data();
      }
      mlp_block(layer, mlp_in, mlp_out.data(), n);
      if (config_.post_norms) norm(lw.ffn_post_norm_weight, {}, mlp_out.data(), mlp_out.data(), n);
      for (int64_t i = 0; i < n * H; ++i) x[i] += mlp_out[i];
    }
  }
}

void CpuRunner::head(const std::vector<int64_t>& last_row, const float* x, float* logits, int32_t* argmax) {
  // Final norm and vocab-parallel logits of each chunk's last token.
  const int64_t H = config_.hidden_size;
  const int64_t m = static_cast<int64_t>(last_row.size());
  std::vector<float> last(m * H), hn(m * H);
  for (int64_t c = 0; c < m; ++c) std::memcpy(last.data() + c * H, x + last_row[c] * H, H * sizeof(float));
  norm(w_.output_norm_weight, w_.output_norm_bias, last.data(), hn.data(), m);
  const int64_t vpr = mine_.vocab_rows.size(), tp = comm_.size();  // equal on every rank (even split)
  const std::vector<float>& lm_head = w_.output.empty() ? w_.token_embd : w_.output;
  std::vector<float> local(m * vpr), gathered(tp * m * vpr);
  linear(pool_, hn.data(), lm_head.data(), opt(w_.output_bias), local.data(), m, H, vpr);
  comm_.all_gather(local.data(), gathered.data(), m * vpr, DType::F32);
  if (config_.final_logit_softcapping > 0)  // Gemma 2: before the argmax and whatever samples from the logits
    softcap(gathered.data(), static_cast<int64_t>(gathered.size()), static_cast<float>(config_.final_logit_softcapping));

  // gathered is [tp][m][vpr]; global id r * vpr + j; ids >= vocab_size are padding and dropped.
  const int64_t V = config_.vocab_size;
  for (int64_t c = 0; c < m; ++c) {
    int32_t best = 0;
    float best_v = -INFINITY;
    for (int64_t id = 0; id < V; ++id) {
      const float v = gathered[((id / vpr) * m + c) * vpr + id % vpr];
      if (logits) logits[c * V + id] = v;
      if (v > best_v) {  // strict: the lowest id wins ties
        best_v = v;
        best = static_cast<int32_t>(id);
      }
    }
    if (argmax) argmax[c] = best;
  }
}

void CpuRunner::forward(const std::vector<SeqChunk>& chunks, float* logits, int32_t* argmax) {
  check_chunks(chunks);
  if (needs_rounds(chunks, max_step_positions_))
    return forward_in_rounds(chunks, max_step_positions_, config_.vocab_size, logits, argmax,
                             [this](const std::vector<SeqChunk>& c, float* l, int32_t* a) { forward(c, l, a); });
  if (layout_.pp_size > 1) return forward_pipeline(chunks, logits, argmax);
  std::vector<int64_t> last_row;  // row of each chunk's last token
  const std::vector<TokenInfo> toks = tokens_of(chunks, &last_row);
  std::vector<float> x(toks.size() * config_.hidden_size);
  embed(toks, x.data());
  run_layers(toks, x);
  if (logits || argmax) head(last_row, x.data(), logits, argmax);
}

void CpuRunner::forward_pipeline(const std::vector<SeqChunk>& chunks, float* logits, int32_t* argmax) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point start = Clock::now();
  auto waited = [this](Clock::time_point t0) { wait_s_ += std::chrono::duration<double>(Clock::now() - t0).count(); };
  const int64_t H = config_.hidden_size, V = config_.vocab_size, m = static_cast<int64_t>(chunks.size());
  const int64_t rows = static_cast<int64_t>(output_rows(chunks));
  const bool want = logits || argmax;  // the same on every rank (SPMD)
  // Results of the whole step, filled by the last stage micro-batch by micro-batch: logits [rows, V]
  // (when asked for), then the argmax ids' bits.
  const int64_t logit_floats = logits ? rows * V : 0;
  std::vector<float> results(want ? static_cast<size_t>(logit_floats + rows) : 0);
  int64_t row0 = 0;  // output row of the micro-batch's first chunk
  const int64_t groups = std::min<int64_t>(m, micro_batches_);
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t c0 = g * m / groups, c1 = (g + 1) * m / groups;  // chunks [c0, c1)
    const std::vector<SeqChunk> part(chunks.begin() + c0, chunks.begin() + c1);
    std::vector<int64_t> last_row;
    const std::vector<TokenInfo> toks = tokens_of(part, &last_row);
    std::vector<float> x(toks.size() * H);
    if (link_->first_stage()) {
      embed(toks, x.data());
    } else {
      const Clock::time_point t0 = Clock::now();
      link_->recv_prev(x.data(), x.size() * sizeof(float));
      waited(t0);
    }
    run_layers(toks, x);
    if (!link_->last_stage()) {
      link_->send_next(x.data(), x.size() * sizeof(float));
      continue;
    }
    if (!want) continue;
    std::vector<int32_t> ids(last_row.size());
    head(last_row, x.data(), logits ? results.data() + row0 * V : nullptr, ids.data());
    std::memcpy(results.data() + logit_floats + row0, ids.data(), ids.size() * sizeof(int32_t));
    row0 += static_cast<int64_t>(last_row.size());
  }
  if (want) {
    const Clock::time_point t0 = Clock::now();
    link_->share_from_last(results.data(), results.size() * sizeof(float));
    if (!link_->last_stage()) waited(t0);
  }
  forward_s_ += std::chrono::duration<double>(Clock::now() - start).count();
  if (!want) return;
  if (logits) std::memcpy(logits, results.data(), static_cast<size_t>(logit_floats) * sizeof(float));
  if (argmax) std::memcpy(argmax, results.data() + logit_floats, static_cast<size_t>(rows) * sizeof(int32_t));
}

}  // namespace

std::unique_ptr<ModelRunner> make_cpu_runner(const ModelConfig& config, ModelWeights weights, Communicator& comm,
                                             ThreadPool& pool, const CpuRunnerOptions& options) {
  return std::make_unique<CpuRunner>(config, std::move(weights), comm, pool, options);
}

}  // namespace tpshard::cpu
