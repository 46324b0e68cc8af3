// device_stage_link.h: the CUDA backend's StageLink (runtime/stage_link.h). Neighbouring stages of a
// replica (same tp_rank) share a two-rank DeviceCommunicator (rank_groups.h StagePair: the peer
// communicator on one host, NCCL across hosts); a transfer is that pair's broadcast from the sender.
// Hidden states move device to device; the last stage's results are relayed stage by stage towards
// stage 0 (each hop one broadcast through a device staging buffer).
// Owns: the staging buffer. Does not own: the pair communicators (the worker's).
#pragma once
#include <cstddef>

#include "runtime/cuda/device_comm.h"
#include "runtime/stage_link.h"

namespace tpshard::cuda {

class DeviceStageLink final : public StageLink {
 public:
  /// to_prev: the pair (pp_stage - 1, pp_stage), this rank its rank 1 (nullptr on the first stage);
  /// to_next: the pair (pp_stage, pp_stage + 1), this rank its rank 0 (nullptr on the last stage).
  /// Throws Error when they do not match pp_stage / pp_size.
  DeviceStageLink(int pp_stage, int pp_size, DeviceCommunicator* to_prev, DeviceCommunicator* to_next);
  int pp_stage() const override { return pp_stage_; }
  int pp_size() const override { return pp_size_; }
  /// `data`: device memory of this rank's GPU, complete (the caller synchronized its stream). Returns
  /// once the next stage has received it.
  void send_next(const void* data, size_t bytes) override;
  /// Into device memory `data`, complete on return.
  void recv_prev(void* data, size_t bytes) override;
  /// Host memory (see StageLink).
  void share_from_last(void* data, size_t bytes) override;

 private:
  int pp_stage_, pp_size_;
  DeviceCommunicator* prev_;
  DeviceCommunicator* next_;
  DeviceScratch staging_;  ///< share_from_last's hops
};

}  // namespace tpshard::cuda
