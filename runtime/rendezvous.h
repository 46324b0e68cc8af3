// rendezvous.h: TCP meeting point of the worker processes of one job (POSIX, no CUDA).
// Owns: rank 0 listening on the master address, the other ranks connecting to it, exchange of small
// blobs (the NCCL unique id), and afterwards a liveness channel: when a rank fails or disappears every
// other rank learns it within a fraction of a second (so nobody waits in NCCL forever).
// Does not own: process start (launcher.h), NCCL (runtime/cuda/nccl_comm.h).
#pragma once
#include <atomic>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace tpshard {

/// Split "HOST:PORT" (or "[v6addr]:PORT"). Throws Error naming the string when malformed.
void parse_host_port(const std::string& addr, std::string* host, int* port);

/// A TCP port on 127.0.0.1 that was free a moment ago (for single-node jobs without --master-addr).
int find_free_port();

/// One rank's end of the rendezvous. Wire format: frames of [1-byte type][u32 little-endian length][payload];
/// types 'H' hello (rank, world size, hostname), 'D' data, 'B' bye (normal end), 'F' failure (message).
class Rendezvous {
 public:
  /// rank 0 listens on master_addr's port (all interfaces) and waits for the world_size - 1 others; the
  /// others connect (retrying) and say hello. Throws Error after timeout_s naming the ranks still missing
  /// (rank 0) or the address that could not be reached (others), or on a world-size / duplicate-rank mismatch.
  Rendezvous(const std::string& master_addr, int rank, int world_size, double timeout_s = 120.0);
  /// Announces a normal end ('B') unless a failure was reported, and closes the sockets.
  ~Rendezvous();
  Rendezvous(const Rendezvous&) = delete;
  Rendezvous& operator=(const Rendezvous&) = delete;

  int rank() const { return rank_; }
  int world_size() const { return world_; }
  /// Hostname of every rank (rank 0 knows all; others know their own and rank 0's; unknown = "").
  const std::vector<std::string>& hostnames() const { return hosts_; }

  /// rank 0's blob to every rank (the argument is ignored on other ranks). Only before start_monitor().
  std::string broadcast(const std::string& blob);
  /// Every rank's blob, in rank order, on every rank (through rank 0). Only before start_monitor().
  std::vector<std::string> all_gather(const std::string& blob);

  /// Watch the peers from a background thread. on_failure(message) is called once when a peer reports a
  /// failure or its connection drops before it said bye; rank 0 first relays the message to the others.
  void start_monitor(std::function<void(const std::string&)> on_failure);
  /// Tell the others this rank failed (best effort; rank 0 relays it). Then the destructor sends no bye.
  void report_failure(const std::string& message);

 private:
  void monitor_loop();
  void send_frame(int fd, char type, const std::string& payload);

  int rank_ = 0;
  int world_ = 1;
  double timeout_s_ = 120.0;
  std::vector<int> fds_;        ///< rank 0: socket of rank r (index r; -1 for itself); others: fds_[0] = rank 0
  std::vector<bool> said_bye_;  ///< rank 0: peer r ended normally
  std::vector<std::string> hosts_;
  std::mutex send_mu_;
  std::atomic<bool> failed_{false};  ///< this rank reported a failure (or saw one): no bye, no callback
  bool monitoring_ = false;
  int stop_pipe_[2] = {-1, -1};
  std::thread monitor_;
  std::function<void(const std::string&)> on_failure_;
};

}  // namespace tpshard
