// host_exchange.cpp: HostExchange implementations (see host_exchange.h).
#include "runtime/host_exchange.h"

#include <chrono>

#include "format/error.h"
#include "runtime/rendezvous.h"

namespace tpshard {

std::string HostExchange::broadcast(const std::string& blob, int root) {
  TPS_CHECK(root >= 0 && root < size(),
            "host exchange broadcast: root " + std::to_string(root) + " out of range for " + std::to_string(size()) +
                " ranks",
            "this is a bug in tpshard");
  std::vector<std::string> all = all_gather(rank() == root ? blob : std::string());
  return std::move(all[size_t(root)]);
}

ThreadExchangeGroup::ThreadExchangeGroup(int size, double timeout_s)
    : size_(size), timeout_s_(timeout_s), slots_(size_t(size > 0 ? size : 0)) {
  TPS_CHECK(size >= 1, "ThreadExchangeGroup: size " + std::to_string(size) + " must be >= 1",
            "this is a bug in the caller");
}

std::vector<std::string> ThreadExchangeGroup::all_gather(int rank, const std::string& mine) {
  TPS_CHECK(rank >= 0 && rank < size_,
            "thread exchange: rank " + std::to_string(rank) + " out of range for " + std::to_string(size_) + " ranks",
            "this is a bug in the caller");
  std::unique_lock<std::mutex> lock(mutex_);
  auto check_alive = [&] {
    TPS_CHECK(!aborted_, "thread exchange (rank " + std::to_string(rank) + "): the group failed: " + abort_reason_,
              "another rank failed; see its message");
  };
  check_alive();
  slots_[size_t(rank)] = mine;
  const uint64_t round = generation_;
  if (++arrived_ == size_) {
    // Last to arrive: publish. A waiter of this round copies result_ under the lock before it can arrive
    // in the next round, and the next round completes only once every rank arrived, so result_ is not
    // overwritten while a waiter of this round still needs it.
    result_ = slots_;
    arrived_ = 0;
    ++generation_;
    cv_.notify_all();
    return result_;
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s_);
  while (generation_ == round && !aborted_) {
    if (cv_.wait_until(lock, deadline) == std::cv_status::timeout && generation_ == round && !aborted_) {
      aborted_ = true;
      abort_reason_ = "rank " + std::to_string(rank) + " waited " + std::to_string(int(timeout_s_)) +
                      " s for the other ranks";
      cv_.notify_all();
    }
  }
  check_alive();
  return result_;
}

void ThreadExchangeGroup::abort(const std::string& reason) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!aborted_) {
    aborted_ = true;
    abort_reason_ = reason;
  }
  cv_.notify_all();
}

ThreadExchange::ThreadExchange(std::shared_ptr<ThreadExchangeGroup> group, int rank)
    : group_(std::move(group)), rank_(rank) {
  TPS_CHECK(group_ != nullptr && rank >= 0 && rank < group_->size(),
            "ThreadExchange: rank " + std::to_string(rank) + " out of range (or no group)",
            "this is a bug in the caller");
}

int RendezvousExchange::rank() const { return rendezvous_.rank(); }
int RendezvousExchange::size() const { return rendezvous_.world_size(); }
std::vector<std::string> RendezvousExchange::all_gather(const std::string& mine) {
  return rendezvous_.all_gather(mine);
}

}  // namespace tpshard
