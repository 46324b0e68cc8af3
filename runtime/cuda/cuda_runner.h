// cuda_runner.h: the CUDA transformer (issue: GPU runtime part 2) behind the ModelRunner interface.
#pragma once
#include <cstdint>
#include <memory>

#include "model/manifest.h"
#include "runtime/comm.h"
#include "runtime/cuda/weight_arena.h"
#include "runtime/model_runner.h"
#include "runtime/stage_link.h"

namespace tpshard::cuda {

struct CudaRunnerOptions {
  int max_batch = 8;
  int max_seq_len = 2048;
  bool use_cuda_graphs = true;  ///< capture decode steps per batch-size bucket
  /// Tokens per GPU step (the activation workspace is sized for it); a longer forward runs in several
  /// steps. 0: kMaxStepTokens (model/memory_plan.h, 1024), the size `tpshard plan` assumes.
  int max_step_tokens = 0;
  /// Greedy decode lookahead (cuda_runner.cpp, decode_step): compute decode step s + 1 on the GPU while
  /// the host handles step s. Off with TPSHARD_NO_LOOKAHEAD=1 (runtime/tuning.h; A/B timing). Results are identical.
  bool lookahead = true;
  /// Programmatic dependent launch of the decode kernels (kernels/pdl.cuh, process-wide: the runner sets
  /// it when it is built). Off with TPSHARD_NO_PDL=1 (runtime/tuning.h; A/B timing, debugging).
  bool pdl = true;
  /// Cascade decode attention (kernels/attention_cascade.cuh): decode steps whose rows share a prefix
  /// slot read the prefix once per block of those rows. On with TPSHARD_CASCADE_ATTENTION=1
  /// (runtime/tuning.h; off by default: slower than each row reading its prefix itself, measured). Results
  /// agree within fp32 rounding.
  bool cascade_attention = false;
  /// Pipeline parallelism: this runner is stage `link->pp_stage()` of `link->pp_size()` (the weights hold
  /// that stage's tensors); nullptr = one stage. Must outlive the runner. With several stages decode runs
  /// eagerly (no CUDA graphs, no lookahead): every step passes through the link.
  StageLink* link = nullptr;
  /// Micro-batches per forward() with several stages (chunks split into that many groups; 0 = 2 x
  /// pp_size): while stage s runs micro-batch k, stage s - 1 runs k + 1.
  int micro_batches = 0;
  /// Run one full prefill step and one decode step of dummy tokens when the runner is built (CUDA's lazy
  /// kernel loading, cuBLASLt's first calls and the decode graph of max_batch rows happen there instead
  /// of inside the first request's prefill and decode; measured in docs/WORKLOADS.md). Every rank of
  /// the model must build its runner with the same value (the warm-up steps run its collectives).
  bool warm_up = true;
};

/// Build the runner for this rank. `comm` is a DeviceCommunicator (make_device_comm.h: local, peer or NCCL;
/// its stream is the compute stream);
/// `weights` must outlive the runner. Allocates kv_cache and workspace once, up front; throws Error
/// with the numbers when they do not fit in free device memory.
/// Decode steps whose results came from the lookahead (computed ahead), and decode steps in total, of a
/// runner made by make_cuda_runner (both 0 for any other runner). For tests and benchmarks.
struct LookaheadStats {
  int64_t ahead_used = 0;
  int64_t decode_steps = 0;
};
LookaheadStats lookahead_stats(const ModelRunner& runner);

std::unique_ptr<ModelRunner> make_cuda_runner(const Manifest& manifest, int tp_rank, int tp_size,
                                              const WeightArena& weights, Communicator& comm,
                                              const CudaRunnerOptions& opts);

}  // namespace tpshard::cuda
