// transformer.cu: the GPU forward pass of one rank (see transformer.h).
#include "runtime/cuda/layers/transformer.h"

#include <cmath>
#include <cstdlib>

#include "format/error.h"
#include "kernels/activation.cuh"
#include "kernels/attention.cuh"
#include "kernels/attention_prefill.cuh"
#include "kernels/bias_add.cuh"
#include "kernels/embedding.cuh"
#include "kernels/head_norm.cuh"
#include "kernels/kv_cache.cuh"
#include "kernels/linear.cuh"
#include "kernels/moe_block.cuh"
#include "kernels/norm.cuh"
#include "kernels/qk_norm.cuh"
#include "kernels/rotary.cuh"
#include "kernels/softcap.cuh"
#include "model/activation_plan.h"
#include "model/kv_ring.h"
#include "model/moe_routing.h"
#include "runtime/query_tiles.h"
#include "runtime/rope.h"
#include "runtime/cuda/check.h"

namespace tpshard::cuda {
namespace {

template <typename P>
void alloc(P*& p, size_t bytes, size_t& total) {
  void* v = nullptr;
  TPS_CUDA_CHECK(cudaMalloc(&v, bytes == 0 ? 16 : bytes));
  p = static_cast<P*>(v);
  total += bytes;
}

/// kv_cache positions per slot of each layer of the stage (model/kv_ring.h).
std::vector<int> stage_kv_positions(const ModelConfig& c, Range stage, int max_seq_len) {
  std::vector<int> out;
  for (int64_t l = stage.begin; l < stage.end; ++l) out.push_back(static_cast<int>(kv_cache_positions(c, l, max_seq_len)));
  return out;
}

}  // namespace

Transformer::Transformer(const ModelConfig& c, const ParallelLayout& layout, int tp_rank, int pp_stage,
                         const ModelWeights& w, Communicator& comm, cudaStream_t stream, int max_tokens, int max_rows,
                         int kv_slots, int max_seq_len)
    : c_(c),
      layout_(layout),
      mine_(layout.tp(tp_rank)),
      tp_rank_(tp_rank),
      pp_stage_(pp_stage),
      stage_(layout.stage_layers.at(static_cast<size_t>(pp_stage))),
      w_(w),
      comm_(comm),
      stream_(stream),
      max_tokens_(max_tokens),
      max_rows_(max_rows),
      max_seq_len_(max_seq_len),
      kv_(stage_kv_positions(c, stage_, max_seq_len), kv_slots, static_cast<int>(mine_.kv_heads.size()),
          static_cast<int>(c.head_dim), w.dtype) {
  TPS_CHECK(c.num_local_experts == 0 || !c.use_parallel_residual,
            "the CUDA backend runs mixture-of-experts MLPs with a sequential residual only (" + c.architecture + ")",
            "run it with --device cpu");
  gemv_tuning_ = gemv_tuning_for(static_cast<int>(layout.tp_size));
  const size_t es = dtype_size(w_.dtype);
  // Every buffer's size comes from the plan `tpshard plan` adds up (model/activation_plan.h).
  const ActivationPlan ap = plan_activations(c_, mine_, layout_.tp_size, es, max_tokens_, max_rows_);
  size_t& total = workspace_bytes_;
  inv_freq_host_ = ::tpshard::rope_inv_freq(c_);  // runtime/rope.h: the table the CPU backend uses
  alloc(inv_freq_, inv_freq_host_.size() * sizeof(float), total);
  if (!inv_freq_host_.empty())
    TPS_CUDA_CHECK(cudaMemcpy(inv_freq_, inv_freq_host_.data(), inv_freq_host_.size() * sizeof(float),
                              cudaMemcpyHostToDevice));
  alloc(meta_dev_, ap.meta, total);
  TPS_CUDA_CHECK(cudaMallocHost(&meta_host_, ap.meta));
  alloc(residual_, ap.residual, total);
  alloc(h1_, ap.h1, total);
  alloc(h2_, ap.h2, total);
  alloc(qkv_, ap.qkv, total);
  alloc(attn_, ap.attn, total);
  alloc(ffn_, ap.ffn, total);
  alloc(act_, ap.act, total);
  alloc(out_, ap.out, total);
  alloc(last_, ap.last, total);
  alloc(logits_, ap.logits, total);
  alloc(argmax_, ap.argmax, total);
  alloc(argmax_partial_, ap.argmax_partial, total);
  alloc(argmax_counters_, ap.argmax_counters, total);
  TPS_CUDA_CHECK(cudaMemset(argmax_counters_, 0, ap.argmax_counters));
  // split-K is used only for steps of at most max_rows tokens (decode); prefill steps use one split
  max_splits_ = kAttentionMaxSplits;
  alloc(partial_, ap.attention_partial, total);
  alloc(split_counters_, ap.attention_counters, total);
  alloc(qk_sums_, ap.qk_sums, total);
  TPS_CUDA_CHECK(cudaMemset(split_counters_, 0, ap.attention_counters));
  alloc(cascade_partial_, ap.cascade_partial, total);
  if (c_.num_local_experts > 0) alloc_moe(es);
}

void Transformer::alloc_moe(size_t es) {
  // The sizes model/activation_plan.h adds up as "moe" (ffn_ / act_ hold one expert's rows).
  const size_t T = static_cast<size_t>(max_tokens_), E = static_cast<size_t>(c_.num_local_experts);
  const size_t K = static_cast<size_t>(c_.num_experts_per_tok), H = static_cast<size_t>(c_.hidden_size);
  const size_t rows = static_cast<size_t>(moe_permuted_rows(static_cast<int64_t>(T * K), static_cast<int64_t>(E)));
  size_t& total = workspace_bytes_;
  alloc(moe_.router_logits, T * E * sizeof(float), total);
  alloc(moe_.ids, T * K * sizeof(int32_t), total);
  alloc(moe_.weights, T * K * sizeof(float), total);
  alloc(moe_.slots, T * K * sizeof(int32_t), total);
  alloc(moe_.offsets, (2 * E + 1) * sizeof(int32_t), total);
  TPS_CUDA_CHECK(cudaMallocHost(&moe_.offsets_host, (2 * E + 1) * sizeof(int32_t)));
  alloc(moe_.gathered, rows * H * es, total);
  alloc(moe_.expert_out, rows * H * es, total);
  alloc(moe_.acc, T * H * sizeof(float), total);
  moe_.ffn = ffn_;
  moe_.act = act_;
}

Transformer::~Transformer() {
  for (void* p : {static_cast<void*>(inv_freq_), static_cast<void*>(meta_dev_), static_cast<void*>(residual_), h1_, h2_,
                  qkv_, attn_, ffn_, act_, out_, last_, static_cast<void*>(logits_), static_cast<void*>(argmax_),
                  static_cast<void*>(partial_), static_cast<void*>(split_counters_), static_cast<void*>(cascade_partial_),
                  static_cast<void*>(argmax_partial_), static_cast<void*>(argmax_counters_), static_cast<void*>(qk_sums_)})
    cudaFree(p);
  for (void* p : {static_cast<void*>(moe_.router_logits), static_cast<void*>(moe_.ids), static_cast<void*>(moe_.weights),
                  static_cast<void*>(moe_.slots), static_cast<void*>(moe_.offsets), moe_.gathered, moe_.expert_out,
                  static_cast<void*>(moe_.acc)})
    if (p) cudaFree(p);
  cudaFreeHost(meta_host_);
  if (moe_.offsets_host) cudaFreeHost(moe_.offsets_host);
}

StepMeta Transformer::meta_device(int n, int n_rows, bool decode, bool cascade) const {
  StepMeta m;
  m.tokens = meta_dev_;
  m.slots = meta_dev_ + max_tokens_;
  m.positions = meta_dev_ + 2 * max_tokens_;
  m.last_rows = meta_dev_ + 3 * max_tokens_;
  m.prefix_slots = meta_dev_ + 4 * max_tokens_;
  m.prefix_lens = meta_dev_ + 5 * max_tokens_;
  m.n = n;
  m.n_rows = n_rows;
  m.decode = decode && n == n_rows;
  m.cascade = m.decode && cascade;
  if (!m.decode) {
    m.q_tiles = meta_dev_ + 6 * max_tokens_;
    m.num_q_tiles = num_q_tiles_;
  }
  return m;
}

void Transformer::upload_meta(int n) {
  const int32_t* h = meta_host_;
  const size_t T = static_cast<size_t>(max_tokens_);
  num_q_tiles_ = query_tiles(h + T, h + 2 * T, h + 4 * T, h + 5 * T, n, kPrefillTileRows, meta_host_ + 6 * T);
  TPS_CUDA_CHECK(cudaMemcpyAsync(meta_dev_, meta_host_, kStepMetaArrays * static_cast<size_t>(max_tokens_) * sizeof(int32_t),
                                 cudaMemcpyHostToDevice, stream_));
}

void Transformer::all_reduce(void* buf, size_t count, DType dtype) {
  if (layout_.tp_size == 1) return;
  if (car_ && car_->eligible(buf, count, dtype)) {
    car_->all_reduce_sum(buf, count, dtype, stream_);
  } else {
    comm_.all_reduce_sum(buf, count, dtype);
  }
}

void Transformer::reduce_add_norm(const AddNormParams& p, bool reduce) {
  if (reduce && layout_.tp_size > 1) {
    if (car_ && car_->add_norm_eligible(p)) {
      car_->all_reduce_add_norm(p, stream_);
      return;
    }
    all_reduce(const_cast<void*>(p.add0), static_cast<size_t>(p.n) * p.hidden, p.dtype);
  }
  add_norm(p, stream_);
}

void Transformer::linear(const GemvArgs& a, void* scratch) { cuda::linear(a, gemm_, scratch, /*use_gemv=*/true, stream_); }

void Transformer::run(const StepMeta& m) {
  if (first_stage()) embed(m);  // other stages: the previous stage's hidden states are in residual_
  Pending pending;
  for (int i = static_cast<int>(stage_.begin); i < static_cast<int>(stage_.end); ++i) layer(i, m, pending);
  if (last_stage()) {
    head(m, pending);
  } else {
    flush_pending(pending, m);
  }
}

void Transformer::flush_pending(const Pending& pending, const StepMeta& m) {
  const int H = static_cast<int>(c_.hidden_size);
  if (pending.reduce && layout_.tp_size > 1) all_reduce(const_cast<void*>(pending.add0), static_cast<size_t>(m.n) * H, w_.dtype);
  AddNormParams p;  // no output: the adds only
  p.residual = residual_;
  p.add0 = pending.add0;
  p.add0_weight = pending.add0_weight;
  p.add_bias0 = pending.bias0;
  p.add_bias1 = pending.bias1;
  p.dtype = w_.dtype;
  p.kind = c_.norm;
  p.eps = static_cast<float>(c_.norm_eps);  // the add0 post-norm's
  p.weight_offset = static_cast<float>(c_.norm_weight_offset);
  p.n = m.n;
  p.hidden = H;
  add_norm(p, stream_);
}

void Transformer::embed(const StepMeta& m) {
  const int H = static_cast<int>(c_.hidden_size);
  EmbeddingParams e;
  e.tokens = m.tokens;
  e.table = w_.token_embd;
  e.out = residual_;
  e.dtype = w_.dtype;
  e.n = m.n;
  e.hidden = H;
  e.vocab_per_rank = mine_.vocab_rows.size();
  e.vocab_begin = mine_.vocab_rows.begin;
  e.scale = static_cast<float>(c_.embedding_scale);  // Gemma 2: sqrt(hidden_size)
  if (w_.position_embd && tp_rank_ == 0) {  // learned positions: added by one rank, once after the sum
    e.pos_table = w_.position_embd;
    e.positions = m.positions;
  }
  embedding_lookup(e, stream_);
  all_reduce(residual_, static_cast<size_t>(m.n) * H, DType::F32);
}

void Transformer::head(const StepMeta& m, const Pending& pending) {
  const int H = static_cast<int>(c_.hidden_size);
  AddNormParams fn;
  fn.residual = residual_;
  fn.add0 = pending.add0;
  fn.add0_weight = pending.add0_weight;
  fn.add_bias0 = pending.bias0;
  fn.add_bias1 = pending.bias1;
  fn.weight0 = w_.output_norm_weight;
  fn.bias0 = w_.output_norm_bias;
  fn.out0 = h1_;
  fn.dtype = w_.dtype;
  fn.kind = c_.norm;
  fn.eps = static_cast<float>(c_.norm_eps);
  fn.weight_offset = static_cast<float>(c_.norm_weight_offset);
  fn.n = m.n;
  fn.hidden = H;
  GemvArgs g;  // the LM head
  g.x = m.decode ? h1_ : last_;
  g.w = w_.output;
  g.bias = w_.output_bias;  // GPT-J's lm_head bias (the rank's vocab rows), else nullptr
  g.y = logits_;
  g.n = m.n_rows;
  g.out = static_cast<int>(mine_.vocab_rows.size());
  g.in = H;
  g.dtype = w_.dtype;
  g.out_dtype = DType::F32;
  g.tuning = gemv_tuning_;
  reduce_add_norm(fn, pending.reduce);
  if (!m.decode) gather_rows(h1_, last_, m.last_rows, m.n_rows, H, w_.dtype, stream_);
  linear(g, nullptr);
  if (c_.final_logit_softcapping > 0)  // Gemma 2: on the logits, before the argmax and any sampling
    softcap_f32(logits_, static_cast<int64_t>(m.n_rows) * g.out, static_cast<float>(c_.final_logit_softcapping), stream_);

  ArgmaxParams a;
  a.logits = logits_;
  a.out = argmax_;
  a.n = m.n_rows;
  a.vocab_per_rank = mine_.vocab_rows.size();
  a.vocab_begin = mine_.vocab_rows.begin;
  a.vocab_size = c_.vocab_size;
  a.splits = argmax_splits(a.n, a.vocab_per_rank);  // decode: rows split over blocks
  a.partial = argmax_partial_;
  a.counters = argmax_counters_;
  vocab_argmax(a, stream_);
}

void Transformer::layer(int i, const StepMeta& m, Pending& pending) {
  const LayerWeights& lw = w_.layers[i];
  const int H = static_cast<int>(c_.hidden_size);
  AddNormParams nrm;
  nrm.residual = residual_;
  nrm.add0 = pending.add0;
  nrm.add0_weight = pending.add0_weight;
  nrm.add_bias0 = pending.bias0;
  nrm.add_bias1 = pending.bias1;
  nrm.weight0 = lw.attn_norm_weight;
  nrm.bias0 = lw.attn_norm_bias;
  nrm.out0 = h1_;
  nrm.normalize0 = c_.pre_norms;  // OLMo 2: the attention reads the residual stream itself
  if (c_.use_parallel_residual) {
    nrm.weight1 = lw.ffn_norm_weight;
    nrm.bias1 = lw.ffn_norm_bias;
    nrm.out1 = h2_;
  }
  nrm.dtype = w_.dtype;
  nrm.kind = c_.norm;
  nrm.eps = static_cast<float>(c_.norm_eps);
  nrm.weight_offset = static_cast<float>(c_.norm_weight_offset);
  nrm.n = m.n;
  nrm.hidden = H;
  reduce_add_norm(nrm, pending.reduce);

  if (c_.use_parallel_residual) {
    // x + attn(ln1(x)) + mlp(ln2(x)): both partial sums into out_, one all_reduce, biases added once
    const GemvArgs q = qkv_args(i, m, h1_), u = up_args(i, m, h2_);
    GemvArgs od = out_args(i, m, out_, 0.f);
    const GemvArgs d = down_args(i, m, out_, 0.f);
    od.x2 = d.x;  // output projection + MLP down: one product over [attn | act]
    od.w2 = d.w;
    od.in2 = d.in;
    // act comes from gemv_pair, two launches back (attention waits before it triggers): the MLP down half
    // streams while attention runs
    od.x2_early = true;
    if (m.n <= kLinearGemvMaxTokens && !gemv_pair_unsupported_reason(q, u) &&
        gemv_supported(od)) {  // decode: 3 launches for the layer's 4 products
      gemv_pair(q, u, stream_);
      attention_core(i, m);
      gemv(od, stream_);
    } else {
      linear(q, nullptr);
      attention_core(i, m);
      linear(out_args(i, m, out_, 0.f), nullptr);
      linear(u, ffn_);
      linear(down_args(i, m, out_, 1.f), nullptr);
    }
    pending = {out_, lw.attn_output_bias, lw.ffn_down_bias, /*reduce=*/true, nullptr};  // all_reduce fused into the next norm
    return;
  }
  linear(qkv_args(i, m, h1_), nullptr);
  const GemvArgs o = out_args(i, m, out_, 0.f);
  attention_core(i, m);
  linear(o, nullptr);
  AddNormParams n2 = nrm;
  n2.add0 = out_;
  n2.add0_weight = lw.attn_post_norm_weight;  // post_norms (Gemma 2), else nullptr
  n2.add_bias0 = lw.attn_output_bias;
  n2.add_bias1 = nullptr;
  n2.weight0 = lw.ffn_norm_weight;
  n2.bias0 = lw.ffn_norm_bias;
  n2.out0 = h2_;
  n2.normalize0 = c_.pre_norms;
  reduce_add_norm(n2, /*reduce=*/true);
  if (c_.num_local_experts > 0) {
    moe_mlp(i, m);
  } else {
    linear(up_args(i, m, h2_), ffn_);
    linear(down_args(i, m, out_, 0.f), nullptr);
  }
  pending = {out_, lw.ffn_down_bias, nullptr, /*reduce=*/true, lw.ffn_post_norm_weight};
}

GemvArgs Transformer::qkv_args(int i, const StepMeta& m, const void* h) const {
  const LayerWeights& lw = w_.layers[i];
  const int hd = static_cast<int>(c_.head_dim);
  const int heads = static_cast<int>(mine_.heads.size()), kvh = static_cast<int>(mine_.kv_heads.size());
  GemvArgs g;
  g.x = h;
  g.w = lw.attn_qkv_weight;
  g.y = qkv_;
  g.bias = lw.attn_qkv_bias;
  g.n = m.n;
  g.out = (heads + 2 * kvh) * hd;
  g.in = static_cast<int>(c_.hidden_size);
  g.dtype = g.out_dtype = w_.dtype;
  g.tuning = gemv_tuning_;
  return g;
}

GemvArgs Transformer::out_args(int i, const StepMeta& m, void* out, float beta) const {
  GemvArgs o;
  o.x = attn_;
  o.w = w_.layers[i].attn_output_weight;
  o.y = out;
  o.n = m.n;
  o.out = static_cast<int>(c_.hidden_size);
  o.in = static_cast<int>(mine_.heads.size() * c_.head_dim);
  o.dtype = o.out_dtype = w_.dtype;
  o.beta = beta;
  o.tuning = gemv_tuning_;
  return o;
}

void Transformer::attention_core(int i, const StepMeta& m) {
  const int hd = static_cast<int>(c_.head_dim);
  const int heads = static_cast<int>(mine_.heads.size()), kvh = static_cast<int>(mine_.kv_heads.size());
  const int qkv_rows = (heads + 2 * kvh) * hd;
  if (c_.qk_norm) {  // Qwen3: RMSNorm of each Q and K head, before rotary
    HeadNormParams hn;
    hn.qkv = qkv_;
    hn.row_stride = qkv_rows;
    hn.q_weight = w_.layers[i].attn_q_norm_weight;
    hn.k_weight = w_.layers[i].attn_k_norm_weight;
    hn.dtype = w_.dtype;
    hn.n = m.n;
    hn.num_heads = heads;
    hn.num_kv_heads = kvh;
    hn.head_dim = hd;
    hn.eps = static_cast<float>(c_.norm_eps);
    head_rms_norm(hn, stream_);
  }
  if (c_.qk_norm_across_heads) {  // OLMo 2: RMSNorm of the whole Q and K: sums of squares over all ranks
    const Range owned = layout_.owned_kv_heads(tp_rank_);
    QkNormParams qn;
    qn.qkv = qkv_;
    qn.row_stride = qkv_rows;
    qn.sums = qk_sums_;
    qn.q_weight = w_.layers[i].attn_q_norm_weight;
    qn.k_weight = w_.layers[i].attn_k_norm_weight;
    qn.dtype = w_.dtype;
    qn.n = m.n;
    qn.num_heads = heads;
    qn.num_kv_heads = kvh;
    qn.head_dim = hd;
    qn.q_offset = static_cast<int>(mine_.heads.begin);
    qn.k_offset = static_cast<int>(mine_.kv_heads.begin);
    qn.k_count_begin = static_cast<int>(owned.begin - mine_.kv_heads.begin);
    qn.k_count_end = static_cast<int>(owned.end - mine_.kv_heads.begin);
    qn.q_total = static_cast<int>(c_.num_attention_heads * hd);
    qn.k_total = static_cast<int>(c_.num_key_value_heads * hd);
    qn.eps = static_cast<float>(c_.norm_eps);
    qk_sum_squares(qn, stream_);
    all_reduce(qk_sums_, 2 * static_cast<size_t>(m.n), DType::F32);
    qk_norm_apply(qn, stream_);
  }
  AttentionParams a;
  a.q = qkv_;
  a.q_stride = qkv_rows;
  a.k_cache = kv_.k(i - static_cast<int>(stage_.begin));
  a.v_cache = kv_.v(i - static_cast<int>(stage_.begin));
  a.slots = m.slots;
  a.positions = m.positions;
  a.prefix_slots = m.prefix_slots;
  a.prefix_lens = m.prefix_lens;
  a.q_tiles = m.q_tiles;
  a.num_q_tiles = m.num_q_tiles;
  a.out = attn_;
  a.partial = partial_;
  a.split_counters = split_counters_;
  a.dtype = w_.dtype;
  a.n = m.n;
  a.num_heads = heads;
  a.num_kv_heads = kvh;
  a.kv_group = static_cast<int>(c_.num_attention_heads / c_.num_key_value_heads);
  a.head_offset = static_cast<int>(mine_.heads.begin % a.kv_group);
  a.head_dim = hd;
  a.max_seq_len = max_seq_len_;
  a.kv_positions = kv_.positions(i - static_cast<int>(stage_.begin));
  a.num_splits = m.n <= max_rows_ ? attention_num_splits(m.n, heads, max_seq_len_, max_splits_) : 1;
  a.scale = c_.attention_scale > 0 ? static_cast<float>(c_.attention_scale)
                                   : static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)));
  a.window = c_.layer_windows.empty() ? 0 : static_cast<int>(c_.layer_windows[i]);
  a.softcap = static_cast<float>(c_.attn_logit_softcapping);  // Gemma 2; 0: none
  a.decode = m.decode;  // one token per sequence: the decode attention kernel
  if (m.cascade && m.n <= max_rows_) {  // shared prefixes read once per block of rows (where supported)
    a.cascade_partial = cascade_partial_;
    a.cascade_max_splits = kCascadeMaxSplits;
  }
  if (m.decode) {  // rotary + kv_cache append inside the attention kernel
    a.rotary_append = true;
    a.inv_freq = inv_freq_;
    a.rotary_ndims = static_cast<int>(c_.rotary_ndims);
    a.rotary_attention_factor = static_cast<float>(c_.rope_attention_factor);
  } else {
    apply_rotary_and_append(i, m, qkv_rows);
  }
  attention(a, stream_);
}

void Transformer::apply_rotary_and_append(int i, const StepMeta& m, int qkv_rows) {
  const int hd = static_cast<int>(c_.head_dim);
  const int heads = static_cast<int>(mine_.heads.size()), kvh = static_cast<int>(mine_.kv_heads.size());
  RotaryParams r;
  r.qkv = qkv_;
  r.row_stride = qkv_rows;
  r.positions = m.positions;
  r.inv_freq = inv_freq_;
  r.dtype = w_.dtype;
  r.n = m.n;
  r.num_heads = heads;
  r.num_kv_heads = kvh;
  r.head_dim = hd;
  r.rotary_ndims = static_cast<int>(c_.rotary_ndims);
  r.attention_factor = static_cast<float>(c_.rope_attention_factor);
  apply_rotary(r, stream_);

  KvAppendParams kv;
  kv.qkv = qkv_;
  kv.row_stride = qkv_rows;
  kv.k_cache = kv_.k(i - static_cast<int>(stage_.begin));
  kv.v_cache = kv_.v(i - static_cast<int>(stage_.begin));
  kv.slots = m.slots;
  kv.positions = m.positions;
  kv.dtype = w_.dtype;
  kv.n = m.n;
  kv.num_heads = heads;
  kv.num_kv_heads = kvh;
  kv.head_dim = hd;
  kv.max_seq_len = max_seq_len_;
  kv.kv_positions = kv_.positions(i - static_cast<int>(stage_.begin));
  kv_cache_append(kv, stream_);
}

GemvArgs Transformer::up_args(int i, const StepMeta& m, const void* h) const {
  const LayerWeights& lw = w_.layers[i];
  GemvArgs up;  // MLP up (and gate) with its bias and the activation fused
  up.x = h;
  up.w = c_.gated_mlp ? lw.ffn_gate_up_weight : lw.ffn_up_weight;
  up.y = act_;
  up.bias = c_.gated_mlp ? lw.ffn_gate_up_bias : lw.ffn_up_bias;
  up.n = m.n;
  up.out = static_cast<int>(mine_.mlp_columns.size());
  up.in = static_cast<int>(c_.hidden_size);
  up.dtype = up.out_dtype = w_.dtype;
  up.epilogue = c_.gated_mlp ? GemvEpilogue::GatedAct : GemvEpilogue::Act;
  up.act = c_.hidden_act;
  up.tuning = gemv_tuning_;
  return up;
}

GemvArgs Transformer::down_args(int i, const StepMeta& m, void* out, float beta) const {
  GemvArgs down;
  down.x = act_;
  down.w = w_.layers[i].ffn_down_weight;
  down.y = out;
  down.n = m.n;
  down.out = static_cast<int>(c_.hidden_size);
  down.in = static_cast<int>(mine_.mlp_columns.size());
  down.dtype = down.out_dtype = w_.dtype;
  down.beta = beta;
  down.tuning = gemv_tuning_;
  return down;
}

void Transformer::moe_mlp(int i, const StepMeta& m) {
  const LayerWeights& lw = w_.layers[i];
  MoeBlockArgs a;
  a.x = h2_;
  a.router_w = lw.ffn_router_weight;
  a.gate_up_w = lw.ffn_experts_gate_up_weight;
  a.down_w = lw.ffn_experts_down_weight;
  a.out = out_;
  a.n = m.n;
  a.hidden = static_cast<int>(c_.hidden_size);
  a.inter = static_cast<int>(mine_.mlp_columns.size());
  a.experts = static_cast<int>(c_.num_local_experts);
  a.top_k = static_cast<int>(c_.num_experts_per_tok);
  a.dtype = w_.dtype;
  a.act = c_.hidden_act;
  a.exact_rows = !m.decode;  // decode steps run eagerly once, then as captured CUDA graphs: no host sync
  a.tuning = gemv_tuning_;
  a.ws = moe_;
  moe_block(a, gemm_, stream_);
}

}  // namespace tpshard::cuda
