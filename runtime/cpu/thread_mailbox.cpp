// thread_mailbox.cpp: see thread_mailbox.h.
#include "runtime/cpu/thread_mailbox.h"

#include <cstring>

#include "format/error.h"

namespace tpshard::cpu {
namespace {

std::vector<char> bytes_of(const void* data, size_t bytes) {
  const char* p = static_cast<const char*>(data);
  return std::vector<char>(p, p + bytes);
}

}  // namespace

void ThreadMailbox::send(int from, int to, std::vector<char> data) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queues_[{from, to}].push_back(std::move(data));
  }
  cv_.notify_all();
}

std::vector<char> ThreadMailbox::recv(int to, int from) {
  std::unique_lock<std::mutex> lock(mutex_);
  auto& q = queues_[{from, to}];
  cv_.wait(lock, [&] { return aborted_ || !q.empty(); });
  if (aborted_) throw Error("pipeline transfer from rank " + std::to_string(from) + " to rank " + std::to_string(to) +
                                " aborted: " + reason_,
                            "see the first error above: another rank of the job failed");
  std::vector<char> v = std::move(q.front());
  q.pop_front();
  return v;
}

void ThreadMailbox::abort(const std::string& reason) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (aborted_) return;
    aborted_ = true;
    reason_ = reason;
  }
  cv_.notify_all();
}

ThreadStageLink::ThreadStageLink(std::shared_ptr<ThreadMailbox> mailbox, const RankGrid& grid, int world_rank)
    : mailbox_(std::move(mailbox)), grid_(grid), coord_(grid.coord(world_rank)), world_rank_(world_rank) {}

int ThreadStageLink::stage_rank(int pp_stage) const {
  return grid_.world_rank({coord_.dp_rank, pp_stage, coord_.tp_rank});
}

void ThreadStageLink::send_next(const void* data, size_t bytes) {
  TPS_CHECK(!last_stage(), "pipeline: the last stage has no next stage", "this is a bug in the runner");
  mailbox_->send(world_rank_, stage_rank(coord_.pp_stage + 1), bytes_of(data, bytes));
}

void ThreadStageLink::recv_prev(void* data, size_t bytes) {
  TPS_CHECK(!first_stage(), "pipeline: the first stage has no previous stage", "this is a bug in the runner");
  const std::vector<char> v = mailbox_->recv(world_rank_, stage_rank(coord_.pp_stage - 1));
  TPS_CHECK(v.size() == bytes,
            "pipeline: stage " + std::to_string(coord_.pp_stage) + " expected " + std::to_string(bytes) +
                " bytes from the previous stage, got " + std::to_string(v.size()),
            "every rank of the job must run the same steps (SPMD); this is a bug in the caller");
  std::memcpy(data, v.data(), bytes);
}

void ThreadStageLink::share_from_last(void* data, size_t bytes) {
  const int last = grid_.pp_size - 1;
  if (coord_.pp_stage == last) {
    for (int p = 0; p < last; ++p) mailbox_->send(world_rank_, stage_rank(p), bytes_of(data, bytes));
    return;
  }
  const std::vector<char> v = mailbox_->recv(world_rank_, stage_rank(last));
  TPS_CHECK(v.size() == bytes,
            "pipeline: stage " + std::to_string(coord_.pp_stage) + " expected " + std::to_string(bytes) +
                " result bytes from the last stage, got " + std::to_string(v.size()),
            "every rank of the job must run the same steps (SPMD); this is a bug in the caller");
  std::memcpy(data, v.data(), bytes);
}

}  // namespace tpshard::cpu
