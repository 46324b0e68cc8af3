// device_stage_link.cpp: see device_stage_link.h.
#include "runtime/cuda/device_stage_link.h"

#include <string>

#include "format/error.h"
#include "runtime/cuda/check.h"

namespace tpshard::cuda {

DeviceStageLink::DeviceStageLink(int pp_stage, int pp_size, DeviceCommunicator* to_prev, DeviceCommunicator* to_next)
    : pp_stage_(pp_stage), pp_size_(pp_size), prev_(to_prev), next_(to_next) {
  const bool ok = pp_size >= 2 && pp_stage >= 0 && pp_stage < pp_size && (to_prev != nullptr) == (pp_stage > 0) &&
                  (to_next != nullptr) == (pp_stage + 1 < pp_size) && (!to_prev || (to_prev->size() == 2 && to_prev->rank() == 1)) &&
                  (!to_next || (to_next->size() == 2 && to_next->rank() == 0));
  TPS_CHECK(ok, "pipeline: pp_stage " + std::to_string(pp_stage) + " of " + std::to_string(pp_size) +
                    " got communicators that do not connect it to its neighbouring stages",
            "this is a bug in the CUDA worker (runtime/cuda/worker.h)");
}

void DeviceStageLink::send_next(const void* data, size_t bytes) {
  TPS_CHECK(next_, "pipeline: the last stage has no next stage", "this is a bug in the runner");
  next_->broadcast(const_cast<void*>(data), bytes, /*root=*/0);
  next_->synchronize();
}

void DeviceStageLink::recv_prev(void* data, size_t bytes) {
  TPS_CHECK(prev_, "pipeline: the first stage has no previous stage", "this is a bug in the runner");
  prev_->broadcast(data, bytes, /*root=*/0);
  prev_->synchronize();
}

void DeviceStageLink::share_from_last(void* data, size_t bytes) {
  if (bytes == 0) return;
  // The hop towards stage 0 goes over to_prev (this rank its rank 1, the root); from the next stage
  // over to_next (the next stage is its rank 1).
  DeviceCommunicator& any = prev_ ? *prev_ : *next_;
  void* dev = staging_.get(bytes, any);
  if (!next_) {  // the last stage: upload, then the first hop
    TPS_CUDA_CHECK(cudaMemcpyAsync(dev, data, bytes, cudaMemcpyHostToDevice, prev_->stream()));
  } else {
    next_->broadcast(dev, bytes, /*root=*/1);
    next_->synchronize();
  }
  if (prev_) {
    prev_->broadcast(dev, bytes, /*root=*/1);
    prev_->synchronize();
  }
  if (next_) {  // not the last stage: the results arrived
    TPS_CUDA_CHECK(cudaMemcpy(data, dev, bytes, cudaMemcpyDeviceToHost));
  }
}

}  // namespace tpshard::cuda
