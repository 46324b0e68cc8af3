// comm.h: the collective-communication interface every backend implements (Megatron-LM style TP).
// CPU backend: runtime/cpu/thread_comm (tp ranks are threads of one process).
// CUDA backend: runtime/cuda/nccl_comm (one process per GPU; buffers are device pointers, calls are
// enqueued on the communicator's compute stream).
#pragma once
#include <cstddef>

#include "format/dtype.h"

namespace tpshard {

/// One group of ranks: the tensor-parallel group of a pipeline stage of a replica (RankGrid::tp_group,
/// model/parallel_layout.h). All ranks of the group must make the same calls in the same order (SPMD).
/// Buffers live in the backend's memory (host for CPU, device for CUDA).
class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;  ///< the caller's rank in the group (its tp_rank)
  virtual int size() const = 0;  ///< ranks in the group (tp_size), not the job's world_size
  /// In-place element-wise sum over ranks of count elements.
  virtual void all_reduce_sum(void* buf, size_t count, DType dtype) = 0;
  /// recv[r * count + i] = send_of_rank_r[i]; recv holds size() * count elements.
  virtual void all_gather(const void* send, void* recv, size_t count, DType dtype) = 0;
  /// Copy bytes from root's buf into every rank's buf.
  virtual void broadcast(void* buf, size_t bytes, int root) = 0;
  virtual void barrier() = 0;
};

}  // namespace tpshard
