// comm_stage_link.cpp: see comm_stage_link.h.
#include "runtime/cpu/comm_stage_link.h"

#include <string>

#include "format/error.h"

namespace tpshard::cpu {

CommStageLink::CommStageLink(int pp_stage, int pp_size, Communicator* to_prev, Communicator* to_next)
    : pp_stage_(pp_stage), pp_size_(pp_size), prev_(to_prev), next_(to_next) {
  const bool ok = pp_size >= 2 && pp_stage >= 0 && pp_stage < pp_size && (to_prev != nullptr) == (pp_stage > 0) &&
                  (to_next != nullptr) == (pp_stage + 1 < pp_size) &&
                  (!to_prev || (to_prev->size() == 2 && to_prev->rank() == 1)) &&
                  (!to_next || (to_next->size() == 2 && to_next->rank() == 0));
  TPS_CHECK(ok, "pipeline: pp_stage " + std::to_string(pp_stage) + " of " + std::to_string(pp_size) +
                    " got communicators that do not connect it to its neighbouring stages",
            "this is a bug in the CPU worker (runtime/cpu/cpu_worker.cpp)");
}

void CommStageLink::send_next(const void* data, size_t bytes) {
  TPS_CHECK(next_, "pipeline: the last stage has no next stage", "this is a bug in the runner");
  next_->broadcast(const_cast<void*>(data), bytes, /*root=*/0);
}

void CommStageLink::recv_prev(void* data, size_t bytes) {
  TPS_CHECK(prev_, "pipeline: the first stage has no previous stage", "this is a bug in the runner");
  prev_->broadcast(data, bytes, /*root=*/0);
}

void CommStageLink::share_from_last(void* data, size_t bytes) {
  if (bytes == 0) return;
  if (next_) next_->broadcast(data, bytes, /*root=*/1);  // from the next stage (its rank 1)
  if (prev_) prev_->broadcast(data, bytes, /*root=*/1);  // on towards stage 0 (this rank is the root)
}

}  // namespace tpshard::cpu
