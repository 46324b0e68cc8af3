// thread_mailbox.h: the CPU backend's StageLink: the ranks of a job are threads of one process, and
// messages are vectors queued per (sender, receiver) pair. Owns: the queues and their abort (a failing
// rank wakes every receiver with an Error, as ThreadGroup does for collectives).
#pragma once
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "model/parallel_layout.h"
#include "runtime/stage_link.h"

namespace tpshard::cpu {

/// Queues between the world ranks of one CPU job.
class ThreadMailbox {
 public:
  /// Queue `data` for `to` (never blocks).
  void send(int from, int to, std::vector<char> data);
  /// The oldest message from `from` to `to`; blocks. Throws Error after abort().
  std::vector<char> recv(int to, int from);
  /// Wake every receiver with an Error naming `reason`; later receives throw too.
  void abort(const std::string& reason);

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  std::map<std::pair<int, int>, std::deque<std::vector<char>>> queues_;  ///< (from, to)
  bool aborted_ = false;
  std::string reason_;
};

/// One rank's StageLink over a ThreadMailbox: its neighbours are the same tp_rank of the adjacent
/// stages of its replica (RankGrid coordinates).
class ThreadStageLink final : public StageLink {
 public:
  ThreadStageLink(std::shared_ptr<ThreadMailbox> mailbox, const RankGrid& grid, int world_rank);
  int pp_stage() const override { return coord_.pp_stage; }
  int pp_size() const override { return grid_.pp_size; }
  void send_next(const void* data, size_t bytes) override;
  void recv_prev(void* data, size_t bytes) override;
  void share_from_last(void* data, size_t bytes) override;

 private:
  int stage_rank(int pp_stage) const;
  std::shared_ptr<ThreadMailbox> mailbox_;
  RankGrid grid_;
  RankCoord coord_;
  int world_rank_;
};

}  // namespace tpshard::cpu
