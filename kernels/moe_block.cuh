// moe_block.cuh: one rank's mixture-of-experts MLP (transformers' modeling_mixtral.py
// MixtralSparseMoeBlock) before the all_reduce: the replicated router linear, routing (kernels/moe.cuh),
// then every expert's gated MLP over its tokens through linear() (kernels/linear.cuh: the decode GEMV or
// cuBLASLt), the rank's columns of each expert's w1 / w3 (column parallel) and rows of its w2 (row
// parallel), and the routing-weighted sum per token. The output is this rank's partial sum, as the
// dense MLP's down projection.
// Two ways to run the experts, chosen by MoeBlockArgs::exact_rows:
// - exact rows (prefill): the tokens of each expert are gathered into one group per expert (counts,
//   aligned prefix sums, a permutation, all on the GPU); the host reads the 2 E + 1 offsets and counts
//   back (one stream synchronization per layer) and runs one product per expert over exactly its rows.
// - masked (decode, CUDA graphs): no host synchronization; each expert's products run over all n tokens
//   (the most rows it can have) and only the routed tokens' rows are added to the sums. At n <= 2 the
//   products are decode GEMVs that read the expert's count on the device and skip an expert without
//   tokens (GemvArgs::skip_if_zero), so only the routed experts' weights are streamed.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "format/dtype.h"
#include "kernels/gemm.cuh"
#include "kernels/gemv.cuh"
#include "model/model_config.h"

namespace tpshard::cuda {

/// Device buffers of moe_block, sized for up to max_tokens tokens (model/activation_plan.h "moe" adds
/// them up); each 256-byte aligned (separate allocations).
struct MoeWorkspace {
  float* router_logits = nullptr;  ///< [max_tokens, experts] f32
  int32_t* ids = nullptr;          ///< [max_tokens, top_k] routed expert ids
  float* weights = nullptr;        ///< [max_tokens, top_k] routing weights, f32
  int32_t* slots = nullptr;        ///< [max_tokens, top_k] each entry's row in the permuted layout
  int32_t* offsets = nullptr;      ///< [2 experts + 1]: offsets [experts + 1], then counts [experts]
  int32_t* offsets_host = nullptr; ///< [2 experts + 1] pinned host memory: their copy (exact rows only)
  void* gathered = nullptr;        ///< [moe_permuted_rows(max_tokens top_k, experts), hidden] of dtype
  void* expert_out = nullptr;      ///< the same shape: each expert's output rows
  void* ffn = nullptr;             ///< [max_tokens, 2 inter] of dtype: linear()'s cuBLASLt scratch
  void* act = nullptr;             ///< [max_tokens, inter] of dtype: an expert's activations
  float* acc = nullptr;            ///< [max_tokens, hidden] f32: masked mode's sums
};

struct MoeBlockArgs {
  const void* x = nullptr;          ///< [n, hidden] of dtype: the normalized MLP input
  const void* router_w = nullptr;   ///< [experts, hidden] of dtype (replicated)
  const void* gate_up_w = nullptr;  ///< [experts 2 inter, hidden] of dtype: per expert its gate rows, then up rows
  const void* down_w = nullptr;     ///< [experts hidden, inter] of dtype: per expert its down rows
  void* out = nullptr;              ///< [n, hidden] of dtype: this rank's partial sums
  int n = 0;                        ///< tokens, at most the workspace's max_tokens
  int hidden = 0;                   ///< a multiple of 8
  int inter = 0;                    ///< the rank's mlp_columns of each expert
  int experts = 0;                  ///< num_local_experts, 1..kMoeMaxExperts
  int top_k = 0;                    ///< num_experts_per_tok, 1..experts
  DType dtype = DType::F16;         ///< of x, the weights and out: F32, F16 or BF16
  Activation act = Activation::Silu;
  /// true: exact rows (synchronizes the stream once; not capturable); false: masked (capturable).
  bool exact_rows = true;
  GemvTuning tuning;                ///< the decode GEMVs' weight streaming (gemv_tuning_for)
  MoeWorkspace ws;
};

/// Enqueue the block on stream (with exact_rows, also wait for the routing on the host). The same
/// result either way up to the products' rounding. Throws Error on bad sizes or a failed launch / copy.
void moe_block(const MoeBlockArgs& a, Gemm& gemm, cudaStream_t stream);

}  // namespace tpshard::cuda
