// transformer.h: the per-rank transformer forward on the GPU (Megatron-LM tensor parallelism):
// vocab-parallel embedding + all_reduce; per layer column-parallel QKV and MLP up/gate, row-parallel
// attention output and MLP down, each followed by one all_reduce of the communicator (GPT-NeoX parallel residual: the
// attention and MLP partial sums share one all_reduce); final norm; vocab-parallel logits and argmax.
// Gemma 2 (ModelConfig fields, no architecture switch): embedding scale, RMSNorm weight offset, the
// attention / MLP outputs normalized inside the next add_norm (post_norms), attention-score and final
// logit soft-caps. OLMo 2: blocks without pre-norms (AddNormParams::normalize0 false) and q/k RMSNorms over
// the whole projection (kernels/qk_norm.cuh, an all_reduce of per-token sums of squares between its two
// kernels). Mixtral: the MLP is a mixture of experts (kernels/moe_block.cuh: router, top_k routing, each
// expert's column-parallel w1 / w3 and row-parallel w2 over its tokens, the weighted sums) before the same
// all_reduce; prefill steps run each expert over exactly its gathered tokens (one stream synchronization
// per layer), decode steps over all rows, masked, without host synchronization.
// Activations are in the weights' dtype; the residual stream is fp32 (documented in docs/KERNELS.md).
// Everything is enqueued on one stream, with no host synchronization in decode steps (StepMeta::decode),
// so those can be captured in a CUDA graph.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "model/model_config.h"
#include "model/parallel_layout.h"
#include "kernels/gemm.cuh"
#include "kernels/gemv.cuh"
#include "kernels/logits.cuh"
#include "kernels/moe_block.cuh"
#include "runtime/comm.h"
#include "runtime/cuda/custom_all_reduce.h"
#include "runtime/cuda/layers/kv_cache.h"
#include "runtime/cuda/layers/weights.h"

namespace tpshard::cuda {

/// Per-step inputs, all device arrays inside the transformer's meta buffer.
struct StepMeta {
  const int32_t* tokens = nullptr;     ///< [n]
  const int32_t* slots = nullptr;      ///< [n] kv_cache slot of each token
  const int32_t* positions = nullptr;  ///< [n]
  const int32_t* last_rows = nullptr;  ///< [n_rows] token index whose logits are wanted
  const int32_t* prefix_slots = nullptr;  ///< [n] shared prefix's kv_cache slot (SeqChunk::prefix_slot), -1: none
  const int32_t* prefix_lens = nullptr;   ///< [n] its positions, 0: none
  /// [num_q_tiles] first token of each query tile of the prefill attention (runtime/query_tiles.h);
  /// nullptr on decode steps.
  const int32_t* q_tiles = nullptr;
  int num_q_tiles = 0;
  int n = 0;
  int n_rows = 0;
  /// One token per sequence (a decode step) and last_rows[i] == i: rotary + kv_cache append run inside
  /// the attention kernel and the last-row gather is skipped.
  bool decode = false;
  /// A decode step with rows reading a shared prefix: cascade attention (kernels/attention_cascade.cuh)
  /// reads each prefix once per block of the rows sharing it, on the layers it supports.
  bool cascade = false;
};

class Transformer {
 public:
  /// max_tokens: tokens per step; max_rows: logits rows per step; kv_slots includes the scratch slot.
  /// pp_stage of layout.pp_size: the transformer runs that stage's layers only (layout.stage_layers) and
  /// holds their kv_cache; w holds that stage's tensors.
  Transformer(const ModelConfig& c, const ParallelLayout& layout, int tp_rank, int pp_stage, const ModelWeights& w,
              Communicator& comm, cudaStream_t stream, int max_tokens, int max_rows, int kv_slots, int max_seq_len);
  ~Transformer();
  Transformer(const Transformer&) = delete;
  Transformer& operator=(const Transformer&) = delete;

  /// Host-visible staging (pinned) and device copy of the StepMeta arrays: kStepMetaArrays x max_tokens int32.
  int32_t* meta_host() const { return meta_host_; }
  /// StepMeta over the device meta buffer; cascade only applies to decode steps.
  StepMeta meta_device(int n, int n_rows, bool decode = false, bool cascade = false) const;
  /// Fill the query tiles of the step's n tokens (runtime/query_tiles.h) from the host meta, then enqueue
  /// meta_host -> device (layout: tokens | slots | positions | last_rows | prefix_slots | prefix_lens |
  /// q_tiles, max_tokens each).
  void upload_meta(int n);

  /// Enqueue this stage's forward of one step. The first stage starts from the token embeddings, the
  /// others from the hidden states the caller wrote into residual() ([n, hidden] f32, the previous stage's
  /// residual()). The last stage ends with logits_local() = [n_rows, vocab_pr] f32 and argmax_local() =
  /// [n_rows] (value, global id) pairs of this rank's vocabulary range; the others with the hidden
  /// states after their last layer in residual() (the residual stream, fp32, so that a pipeline computes
  /// exactly what one stage does).
  void run(const StepMeta& m);
  float* residual() const { return residual_; }  ///< [max_tokens, hidden] f32
  bool first_stage() const { return pp_stage_ == 0; }
  bool last_stage() const { return pp_stage_ == layout_.pp_size - 1; }
  /// Use `car` (not owned; may be null) for all_reduces it is eligible for, the communicator for the rest
  /// (the runner sets its own on the NCCL path, the peer communicator's on the peer path).
  void set_custom_all_reduce(CustomAllReduce* car) { car_ = car; }
  float* logits_local() const { return logits_; }
  ArgmaxPair* argmax_local() const { return argmax_; }
  int max_tokens() const { return max_tokens_; }
  int max_rows() const { return max_rows_; }
  size_t workspace_bytes() const { return workspace_bytes_; }
  size_t kv_cache_bytes() const { return kv_.bytes(); }

 private:
  struct Pending {  ///< residual adds deferred into the next add_norm
    const void* add0 = nullptr;
    const void* bias0 = nullptr;
    const void* bias1 = nullptr;
    bool reduce = false;  ///< add0 holds this rank's row-parallel partial sums: all_reduce them first
    const void* add0_weight = nullptr;  ///< post_norms: add0's RMSNorm weight (AddNormParams::add0_weight)
  };
  /// add_norm(p) after the all_reduce of p.add0 when `reduce`: one fused kernel
  /// (CustomAllReduce::all_reduce_add_norm) when the custom all_reduce takes it, else all_reduce + add_norm.
  void reduce_add_norm(const AddNormParams& p, bool reduce);
  void layer(int i, const StepMeta& m, Pending& pending);
  /// The vocab-parallel embedding (+ learned positions) into residual_, all_reduced (the first stage).
  void embed(const StepMeta& m);
  /// After the last layer: final norm (with the pending adds), LM head, argmax (the last stage).
  void head(const StepMeta& m, const Pending& pending);
  /// The end of a stage that is not the last: the pending adds (after their all_reduce) into the residual.
  void flush_pending(const Pending& pending, const StepMeta& m);
  /// The layer's products as GemvArgs (shapes of this rank): column-parallel QKV (+bias) of h into qkv_;
  /// row-parallel output projection of attn_ into out (+ beta out); MLP up/gate (+bias, activation) of h
  /// into act_; row-parallel MLP down of act_ into out (+ beta out).
  GemvArgs qkv_args(int i, const StepMeta& m, const void* h) const;
  GemvArgs out_args(int i, const StepMeta& m, void* out, float beta) const;
  GemvArgs up_args(int i, const StepMeta& m, const void* h) const;
  GemvArgs down_args(int i, const StepMeta& m, void* out, float beta) const;
  /// qkv_ -> attn_: rotary and kv_cache append (fused into the attention kernel at decode), attention.
  void attention_core(int i, const StepMeta& m);
  /// Prefill path: rotary on Q/K of the QKV rows in place, then K/V appended to the kv_cache.
  void apply_rotary_and_append(int i, const StepMeta& m, int qkv_rows);
  /// Mixture of experts (num_local_experts > 0): h2_ -> out_, the rank's partial sums of every routed
  /// expert (kernels/moe_block.cuh), exact rows for prefill, masked for decode.
  void moe_mlp(int i, const StepMeta& m);
  /// The mixture-of-experts workspace (moe_; ffn_ and act_ shared), es = bytes of the weight dtype.
  void alloc_moe(size_t es);
  void all_reduce(void* buf, size_t count, DType dtype);
  /// y = epilogue(x W^T + bias): the decode GEMV (kernels/gemv.cuh) when it applies, else cuBLASLt
  /// (into `scratch` for Act / GatedAct) followed by the separate bias_add / activation kernels.
  void linear(const GemvArgs& a, void* scratch);

  ModelConfig c_;
  ParallelLayout layout_;
  TpRankRanges mine_;  ///< this tp_rank's ranges (layout_.tp(tp_rank_))
  int tp_rank_ = 0;
  int pp_stage_ = 0;
  Range stage_;  ///< this stage's layers (global indices); the kv_cache holds these, from 0
  ModelWeights w_;
  Communicator& comm_;
  cudaStream_t stream_;
  int max_tokens_ = 0, max_rows_ = 0, max_seq_len_ = 0, max_splits_ = 1;
  int num_q_tiles_ = 0;  // of the step upload_meta last prepared
  KvCache kv_;
  Gemm gemm_;
  // The decode fast paths, always on where the shape allows them (docs/TUNING.md "Retired switches");
  // the other branches serve the shapes the fast paths do not support.
  GemvTuning gemv_tuning_;           ///< how every decode GEMV streams its weights (gemv_tuning_for(tp_size))
  CustomAllReduce* car_ = nullptr;
  std::vector<float> inv_freq_host_;
  // device buffers
  float* inv_freq_ = nullptr;   // [rotary_ndims/2]
  int32_t* meta_dev_ = nullptr; // [4, max_tokens]
  int32_t* meta_host_ = nullptr;
  float* residual_ = nullptr;   // [max_tokens, hidden] f32
  void* h1_ = nullptr;          // [max_tokens, hidden] normalized (attention input)
  void* h2_ = nullptr;          // [max_tokens, hidden] normalized (MLP input)
  void* qkv_ = nullptr;         // [max_tokens, qkv_rows]
  void* attn_ = nullptr;        // [max_tokens, heads_pr * head_dim]
  void* ffn_ = nullptr;         // [max_tokens, (gated ? 2 : 1) * inter_pr]
  void* act_ = nullptr;         // [max_tokens, inter_pr]
  void* out_ = nullptr;         // [max_tokens, hidden] row-parallel partial sums, all_reduced
  void* last_ = nullptr;        // [max_rows, hidden]
  float* logits_ = nullptr;     // [max_rows, vocab_pr] f32
  ArgmaxPair* argmax_ = nullptr;// [max_rows]
  ArgmaxPair* argmax_partial_ = nullptr;  // [max_rows, kArgmaxMaxSplits] the argmax's per-block pairs
  int32_t* argmax_counters_ = nullptr;    // [max_rows] zero: the argmax's last block merges
  float* partial_ = nullptr;    // attention split-K workspace
  float* cascade_partial_ = nullptr;  // [max_rows, heads_pr, kCascadeMaxSplits, head_dim + 2] prefix partials
  int32_t* split_counters_ = nullptr;  // [max_rows, heads_pr] zero: attention merges splits in-kernel
  float* qk_sums_ = nullptr;    // [max_tokens, 2] qk_norm_across_heads: sums of squares of the whole Q, K
  MoeWorkspace moe_;            // mixture of experts only (kernels/moe_block.cuh)
  size_t workspace_bytes_ = 0;
};

}  // namespace tpshard::cuda
