// stage_link.h: point-to-point transfers between the pipeline stages of one replica, as a backend's
// runner sees them. Stage s sends each micro-batch's hidden states [tokens, hidden] to stage s + 1 (same
// tp_rank: every rank of a tp group holds the whole hidden state after its all_reduce); the last stage
// sends the step's results (logits / argmax) back to every other stage, so that all ranks of the replica
// agree on the next tokens. Implementations: runtime/cpu/thread_mailbox.h (threads of one process, host
// memory), runtime/cuda/device_stage_link.h (processes, device memory over a DeviceCommunicator per pair of
// neighbouring stages).
#pragma once
#include <cstddef>
#include <string>

#include "model/parallel_layout.h"

namespace tpshard {

class StageLink {
 public:
  virtual ~StageLink() = default;
  virtual int pp_stage() const = 0;
  virtual int pp_size() const = 0;
  bool first_stage() const { return pp_stage() == 0; }
  bool last_stage() const { return pp_stage() == pp_size() - 1; }
  /// Send `bytes` at `data` (the backend's memory: host on the CPU, device on CUDA) to the same tp_rank
  /// of stage pp_stage + 1. Returns once the data is copied out of `data` (the CPU link does not wait
  /// for the receiver; the CUDA link waits until the receiver has it), so `data` may be reused.
  virtual void send_next(const void* data, size_t bytes) = 0;
  /// Receive exactly `bytes` from the same tp_rank of stage pp_stage - 1, in send order, into `data`
  /// (the backend's memory). Throws Error when the job was aborted or the size differs.
  virtual void recv_prev(void* data, size_t bytes) = 0;
  /// HOST memory on every backend. On the last stage: send `data` to the same tp_rank of every other
  /// stage. On the others: receive it into `data`. Throws Error like recv_prev.
  virtual void share_from_last(void* data, size_t bytes) = 0;
};

/// The line a pipeline stage's runner returns from ModelRunner::pipeline_report(): its layers, its time in
/// forward() and the part of it spent waiting for other stages (the bubble, measured), in seconds.
std::string pipeline_report_line(int pp_stage, const Range& layers, double forward_s, double wait_s);

}  // namespace tpshard
