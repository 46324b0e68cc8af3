// thread_comm.h: the CPU backend's Communicator: tp ranks are threads of one process sharing a
// ThreadGroup. Collectives exchange host pointers at a barrier; sums run in rank order 0..tp_size-1 on
// every rank, so results are bitwise identical on all ranks and independent of thread timing.
// Owns: the in-process barrier and its abort (a failing rank wakes the others with an Error).
#pragma once
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/comm.h"

namespace tpshard {

/// State shared by the tp_size threads of one CPU tensor-parallel group.
class ThreadGroup {
 public:
  explicit ThreadGroup(int tp_size);
  int size() const { return size_; }
  /// Block until all tp_size ranks arrived. Throws Error once abort() was called (also while waiting).
  void arrive_and_wait();
  /// Wake every waiting rank with an Error; all later collectives throw too. reason goes in the message.
  void abort(const std::string& reason);
  bool aborted() const;
  /// Pointer slot of each rank, published before a barrier and read after it.
  std::vector<const void*> slots;

 private:
  int size_;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  int arrived_ = 0;
  uint64_t generation_ = 0;
  bool aborted_ = false;
  std::string abort_reason_;
};

/// One rank's view of a ThreadGroup. Buffers are host memory. Supported dtypes: F32, F16, BF16
/// (F16/BF16 sums are computed in f32 and rounded once).
class ThreadComm final : public Communicator {
 public:
  ThreadComm(std::shared_ptr<ThreadGroup> group, int tp_rank);
  int rank() const override { return rank_; }
  int size() const override { return group_->size(); }
  void all_reduce_sum(void* buf, size_t count, DType dtype) override;
  void all_gather(const void* send, void* recv, size_t count, DType dtype) override;
  void broadcast(void* buf, size_t bytes, int root) override;
  void barrier() override;

 private:
  std::shared_ptr<ThreadGroup> group_;
  int rank_;
  std::vector<float> scratch_;
};

}  // namespace tpshard
