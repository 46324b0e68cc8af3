// cpu_runner.h: the CPU backend's ModelRunner: the fp32 reference transformer (GPT-NeoX and Llama
// families) on one tp_rank, with Megatron-style tensor parallelism over a Communicator (host buffers).
// Owns: the forward pass and the kv_cache. Does not own: loading (cpu_weights), threads (session).
#pragma once
#include <memory>

#include "model/model_config.h"
#include "runtime/comm.h"
#include "runtime/cpu/cpu_weights.h"
#include "runtime/cpu/thread_pool.h"
#include "runtime/model_runner.h"
#include "runtime/stage_link.h"

namespace tpshard::cpu {

struct CpuRunnerOptions {
  int max_batch = 8;     ///< kv_cache slots
  int max_seq_len = 0;   ///< positions per slot (> 0)
  /// Pipeline parallelism: this runner is stage `link->pp_stage()` of `link->pp_size()` and holds only
  /// that stage's layers (and their kv_cache); nullptr = one stage. Must outlive the runner.
  StageLink* link = nullptr;
  /// Micro-batches per forward() when pp_size > 1 (the chunks split into that many groups, at most one
  /// chunk each; 0 = 2 x pp_size): while stage s runs micro-batch k, stage s - 1 runs k + 1.
  int micro_batches = 0;
};

/// Build the runner for comm.rank() of comm.size(). comm and pool must outlive it. The kv_cache
/// (2 * stage layers * max_batch * kv_heads_per_rank * max_seq_len * head_dim f32) is reserved up front and
/// touched only where used. weights hold the stage's tensors only (load_weights with the same layout).
/// Throws Error for invalid options.
std::unique_ptr<ModelRunner> make_cpu_runner(const ModelConfig& config, ModelWeights weights, Communicator& comm,
                                             ThreadPool& pool, const CpuRunnerOptions& options);

}  // namespace tpshard::cpu
