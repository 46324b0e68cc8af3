// stage_link.h: point-to-point transfers between the pipeline stages of one replica, as a backend's
// runner sees them. Stage s sends each micro-batch's hidden states [tokens, hidden] to stage s + 1 (same
// tp_rank: every rank of a tp group holds the whole hidden state after its all_reduce); the last stage
// sends the step's results (logits / argmax) back to every other stage, so that all ranks of the replica
// agree on the next tokens. Implementations: runtime/cpu/thread_mailbox.h (threads of one process).
#pragma once
#include <cstddef>

namespace tpshard {

class StageLink {
 public:
  virtual ~StageLink() = default;
  virtual int pp_stage() const = 0;
  virtual int pp_size() const = 0;
  bool first_stage() const { return pp_stage() == 0; }
  bool last_stage() const { return pp_stage() == pp_size() - 1; }
  /// Send `floats` values to the same tp_rank of stage pp_stage + 1. Returns once the data is copied
  /// (the receiver may not have asked yet), so a stage goes on with its next micro-batch.
  virtual void send_next(const float* data, size_t floats) = 0;
  /// Receive exactly `floats` values from the same tp_rank of stage pp_stage - 1, in send order.
  /// Throws Error when the job was aborted or the size differs.
  virtual void recv_prev(float* data, size_t floats) = 0;
  /// On the last stage: send `data` to the same tp_rank of every other stage. On the others: receive it
  /// into `data`. Throws Error like recv_prev.
  virtual void share_from_last(float* data, size_t floats) = 0;
};

}  // namespace tpshard
