// host_exchange.h: small host-memory all_gather between the tp ranks of one job, for bootstrapping a
// device communicator without NCCL (hostnames, PCI bus ids, CUDA IPC handles, the NCCL unique id).
// Owns: the HostExchange interface and its three implementations: one rank (SingleExchange), ranks that
// are threads of one process (ThreadExchangeGroup + ThreadExchange), ranks that are processes meeting on
// the TCP rendezvous (RendezvousExchange). Does not own: the rendezvous itself (rendezvous.h), device
// collectives (runtime/cuda/device_comm.h). No CUDA.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace tpshard {

class Rendezvous;

/// A group of size() ranks that can all_gather host strings. Collective: every rank makes the same calls
/// in the same order. Meant for a few small exchanges at start-up, not for data.
class HostExchange {
 public:
  virtual ~HostExchange() = default;
  virtual int rank() const = 0;  ///< tp_rank of the caller
  virtual int size() const = 0;  ///< tp_size
  /// Every rank's `mine` (any length, may differ per rank), in rank order, on every rank.
  /// Throws Error naming the rank when a peer does not arrive in time or the group failed.
  virtual std::vector<std::string> all_gather(const std::string& mine) = 0;
  /// root's `blob` on every rank (the argument is ignored elsewhere); an all_gather underneath.
  std::string broadcast(const std::string& blob, int root = 0);
};

/// The exchange of a single rank: all_gather returns {mine}.
class SingleExchange : public HostExchange {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::vector<std::string> all_gather(const std::string& mine) override { return {mine}; }
};

/// State shared by the size ranks of a ThreadExchange group (ranks are threads of one process, e.g.
/// tools/bench_generate and the GPU tests). Thread-safe; make it once and give it to every rank thread.
class ThreadExchangeGroup {
 public:
  /// size >= 1 ranks; a waiting rank throws Error after timeout_s seconds without the others.
  explicit ThreadExchangeGroup(int size, double timeout_s = 300.0);
  int size() const { return size_; }
  /// Blocking all_gather of rank `rank` (see HostExchange::all_gather).
  std::vector<std::string> all_gather(int rank, const std::string& mine);
  /// Wake every waiting rank with Error("... failed: reason"); later calls throw too. Call it from a rank
  /// thread that fails, so its peers do not wait for the timeout.
  void abort(const std::string& reason);

 private:
  int size_;
  double timeout_s_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<std::string> slots_;   ///< this round's contributions
  std::vector<std::string> result_;  ///< the last completed round (read by its waiters)
  int arrived_ = 0;
  uint64_t generation_ = 0;  ///< completed rounds
  bool aborted_ = false;
  std::string abort_reason_;
};

/// Rank `rank`'s view of a ThreadExchangeGroup (the group must outlive it).
class ThreadExchange : public HostExchange {
 public:
  ThreadExchange(std::shared_ptr<ThreadExchangeGroup> group, int rank);
  int rank() const override { return rank_; }
  int size() const override { return group_->size(); }
  std::vector<std::string> all_gather(const std::string& mine) override { return group_->all_gather(rank_, mine); }

 private:
  std::shared_ptr<ThreadExchangeGroup> group_;
  int rank_;
};

/// The exchange of worker processes over a Rendezvous (not owned). Usable only before
/// Rendezvous::start_monitor(), like the rendezvous' own all_gather.
class RendezvousExchange : public HostExchange {
 public:
  explicit RendezvousExchange(Rendezvous& rendezvous) : rendezvous_(rendezvous) {}
  int rank() const override;
  int size() const override;
  std::vector<std::string> all_gather(const std::string& mine) override;

 private:
  Rendezvous& rendezvous_;
};

}  // namespace tpshard
