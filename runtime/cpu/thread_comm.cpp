// thread_comm.cpp: barrier-based collectives between the tp-rank threads of the CPU backend.
// Every collective is: publish own pointer, barrier, read the others', barrier (so no rank reuses or
// frees its buffer while another still reads it).
#include "runtime/cpu/thread_comm.h"

#include <cstring>

#include "format/error.h"
#include "runtime/cpu/rank_order_sum.h"

namespace tpshard {

ThreadGroup::ThreadGroup(int tp_size) : slots(static_cast<size_t>(tp_size), nullptr), size_(tp_size) {
  TPS_CHECK(tp_size >= 1, "thread communicator: tp_size " + std::to_string(tp_size) + " is not positive",
            "pass --tp 1 or more");
}

void ThreadGroup::arrive_and_wait() {
  std::unique_lock<std::mutex> lock(mutex_);
  if (aborted_) throw Error("tp group aborted: " + abort_reason_, "see the first error reported above");
  const uint64_t gen = generation_;
  if (++arrived_ == size_) {
    arrived_ = 0;
    ++generation_;
    cv_.notify_all();
    return;
  }
  cv_.wait(lock, [&] { return generation_ != gen || aborted_; });
  if (generation_ == gen)  // woken by abort, not by the last arrival
    throw Error("tp group aborted: " + abort_reason_, "see the first error reported above");
}

void ThreadGroup::abort(const std::string& reason) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (aborted_) return;
  aborted_ = true;
  abort_reason_ = reason;
  cv_.notify_all();
}

bool ThreadGroup::aborted() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return aborted_;
}

ThreadComm::ThreadComm(std::shared_ptr<ThreadGroup> group, int tp_rank) : group_(std::move(group)), rank_(tp_rank) {
  TPS_CHECK(tp_rank >= 0 && tp_rank < group_->size(),
            "thread communicator: tp_rank " + std::to_string(tp_rank) + " outside [0, " +
                std::to_string(group_->size()) + ")",
            "this is a bug in the caller");
}

void ThreadComm::all_reduce_sum(void* buf, size_t count, DType dtype) {
  const int n = size();
  if (n == 1) return;
  group_->slots[rank_] = buf;
  group_->arrive_and_wait();
  // Every rank sums all ranks' inputs in rank order: identical results everywhere (rank_order_sum.h).
  sum_in_rank_order(group_->slots, count, dtype, &scratch_);
  group_->arrive_and_wait();  // all ranks finished reading the inputs
  store_sum(scratch_, buf, count, dtype);
}

void ThreadComm::all_gather(const void* send, void* recv, size_t count, DType dtype) {
  const size_t bytes = count * dtype_size(dtype);
  group_->slots[rank_] = send;
  group_->arrive_and_wait();
  for (int r = 0; r < size(); ++r)
    std::memcpy(static_cast<char*>(recv) + r * bytes, group_->slots[r], bytes);
  group_->arrive_and_wait();
}

void ThreadComm::broadcast(void* buf, size_t bytes, int root) {
  TPS_CHECK(root >= 0 && root < size(), "thread communicator: broadcast root " + std::to_string(root) + " out of range",
            "pass a tp_rank in [0, tp_size)");
  group_->slots[rank_] = buf;
  group_->arrive_and_wait();
  if (rank_ != root) std::memcpy(buf, group_->slots[root], bytes);
  group_->arrive_and_wait();
}

void ThreadComm::barrier() { group_->arrive_and_wait(); }

}  // namespace tpshard
