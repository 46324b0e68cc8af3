// comm_stage_link.h: the CPU backend's StageLink between processes: one two-member Communicator per pair
// of neighbouring stages (a GlooComm; stage s is its rank 0, stage s + 1 its rank 1), host memory.
// The threaded backend's link is runtime/cpu/thread_mailbox.h; the CUDA one runtime/cuda/device_stage_link.h
// (the same protocol over device communicators).
#pragma once
#include "runtime/comm.h"
#include "runtime/stage_link.h"

namespace tpshard::cpu {

class CommStageLink final : public StageLink {
 public:
  /// to_prev: the pair with stage pp_stage - 1 (nullptr on stage 0; this rank is its rank 1); to_next: the
  /// pair with stage pp_stage + 1 (nullptr on the last stage; this rank is its rank 0). Not owned. Throws
  /// Error when they do not match pp_stage / pp_size.
  CommStageLink(int pp_stage, int pp_size, Communicator* to_prev, Communicator* to_next);
  int pp_stage() const override { return pp_stage_; }
  int pp_size() const override { return pp_size_; }
  /// Returns once the bytes are handed to the transport (for large messages: once the next stage reads).
  void send_next(const void* data, size_t bytes) override;
  void recv_prev(void* data, size_t bytes) override;
  /// Passed hop by hop from the last stage towards stage 0.
  void share_from_last(void* data, size_t bytes) override;

 private:
  int pp_stage_;
  int pp_size_;
  Communicator* prev_;
  Communicator* next_;
};

}  // namespace tpshard::cpu
