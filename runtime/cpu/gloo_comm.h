// gloo_comm.h: the CPU backend's Communicator between processes (one process per rank: tprun
// --cpu-processes, --nnodes, mpirun, srun, torchrun), over gloo's TCP transport (Debian libgloo-dev).
// The group's members exchange their gloo pair addresses through a HostExchange (the group's TCP
// rendezvous, rank_groups.h), so gloo needs no store of its own. all_reduce_sum is an all_gather
// followed by the sum in rank order (rank_order_sum.h): bitwise the result of the threaded ThreadComm,
// at tp_size x the bytes of a ring all_reduce (CPU activations are small).
// Built only when gloo was found (TPSHARD_HAVE_GLOO); gloo_available() says so.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "runtime/comm.h"
#include "runtime/host_exchange.h"

namespace tpshard {

/// True when this build has the gloo communicator (configured with libgloo-dev installed).
bool gloo_available();

/// Host-memory collectives of one group of processes. Supported dtypes: F32, F16, BF16 (sums in f32,
/// rounded once). A peer that dies makes the pending call throw Error naming the group.
class GlooComm final : public Communicator {
 public:
  /// Connect to the exchange's size() - 1 peers (rank() = exchange.rank()); collective over exchange.
  /// The pair sockets bind 127.0.0.1 when every member runs on this host, else the interface named by
  /// GLOO_SOCKET_IFNAME, else this host's name. `name` goes into error messages ("tp group of ...").
  /// Throws Error after connect_timeout_s without a peer, or when this build lacks gloo.
  GlooComm(HostExchange& exchange, const std::string& name, double connect_timeout_s);
  ~GlooComm() override;
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void all_reduce_sum(void* buf, size_t count, DType dtype) override;
  void all_gather(const void* send, void* recv, size_t count, DType dtype) override;
  void broadcast(void* buf, size_t bytes, int root) override;
  void barrier() override;
  /// A collective threw because the transport failed (a peer died or closed its sockets).
  bool transport_failed() const { return failed_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int rank_ = 0;
  int size_ = 1;
  std::string name_;
  std::vector<char> gathered_;  ///< all_reduce_sum: every rank's input
  std::vector<float> sum_;
  bool failed_ = false;
};

}  // namespace tpshard
