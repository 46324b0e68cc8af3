// rank_groups.h: the sub-groups of a multi-process job's ranks and how their processes meet. A job of
// dp_size x pp_size x tp_size processes (model/parallel_layout.h RankGrid) needs, besides the world
// rendezvous (rendezvous.h: start-up and liveness): a communicator per tensor-parallel group, one per pair
// of neighbouring pipeline stages (the hidden states and results pass there), and an exchange of the
// replicas' output ranks (batch jobs send their lines to dp_rank 0). Each group meets on its own TCP
// rendezvous at its first member, so groups set up independently of each other.
// Owns: the list of groups and its order, the address exchange, meeting a group. Does not own: the
// communicators built on a group (runtime/cuda/make_device_comm.h). No CUDA.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "model/parallel_layout.h"
#include "runtime/rendezvous.h"

namespace tpshard {

enum class GroupKind {
  TensorParallel,
  StagePair,
  ReplicaRanks,  ///< every rank of one replica (tp x pp > 1): per-step control messages (the server)
  Replicas,
};

/// One group: its world ranks, in the order that gives each member its rank in the group.
struct RankGroup {
  GroupKind kind = GroupKind::TensorParallel;
  /// world ranks; TensorParallel by tp_rank, StagePair {stage s, stage s + 1}, ReplicaRanks in world
  /// order (pp_stage, tp_rank), Replicas by dp_rank
  std::vector<int> members;
  std::string name;          ///< e.g. "tp group of dp_rank 0, pp_stage 1" (messages)
  /// The member index of world_rank, or -1 when it is not a member.
  int index_of(int world_rank) const;
};

/// Every group of the grid with more than one member, in the one order all ranks set them up: tensor
/// parallel groups (by dp_rank, pp_stage), stage pairs (by dp_rank, stage s, tp_rank), the ranks of each
/// replica (by dp_rank), then the replicas' output ranks (tp_rank 0 of stage 0 of each replica). Setting up groups one after the other in this
/// order cannot deadlock: the first group not yet complete has all its members waiting in it.
std::vector<RankGroup> job_groups(const RankGrid& grid);

/// Collective over the world rendezvous (before its start_monitor): every rank offers its hostname and
/// one port per group of `groups` it leads (first member), ports that were free on its host. Returns, for
/// every group i, the "HOST:PORT" where it meets (127.0.0.1 when its leader is on this host).
std::vector<std::string> exchange_group_addresses(Rendezvous& world, const std::vector<RankGroup>& groups);

/// Meet `group` at `address` (exchange_group_addresses; world_rank must be a member): its first member
/// listens there, the others connect. The returned rendezvous' rank is the member index; its all_gather
/// is the group's exchange (RendezvousExchange). Throws Error naming the group after timeout_s.
std::unique_ptr<Rendezvous> meet_group(const RankGroup& group, const std::string& address, int world_rank,
                                       double timeout_s);

}  // namespace tpshard
