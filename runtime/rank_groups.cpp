// rank_groups.cpp: see rank_groups.h.
#include "runtime/rank_groups.h"

#include <unistd.h>

#include <algorithm>
#include <sstream>

#include "format/error.h"

namespace tpshard {

int RankGroup::index_of(int world_rank) const {
  auto it = std::find(members.begin(), members.end(), world_rank);
  return it == members.end() ? -1 : static_cast<int>(it - members.begin());
}

std::vector<RankGroup> job_groups(const RankGrid& grid) {
  std::vector<RankGroup> groups;
  for (int d = 0; d < grid.dp_size; ++d)
    for (int s = 0; s < grid.pp_size; ++s)
      if (grid.tp_size > 1)
        groups.push_back({GroupKind::TensorParallel, grid.tp_group(d, s),
                          "tp group of dp_rank " + std::to_string(d) + ", pp_stage " + std::to_string(s)});
  for (int d = 0; d < grid.dp_size; ++d)
    for (int s = 0; s + 1 < grid.pp_size; ++s)
      for (int t = 0; t < grid.tp_size; ++t)
        groups.push_back({GroupKind::StagePair,
                          {grid.world_rank({d, s, t}), grid.world_rank({d, s + 1, t})},
                          "stages " + std::to_string(s) + "-" + std::to_string(s + 1) + " of dp_rank " + std::to_string(d) +
                              ", tp_rank " + std::to_string(t)});
  if (grid.tp_size * grid.pp_size > 1)
    for (int d = 0; d < grid.dp_size; ++d) {
      RankGroup g{GroupKind::ReplicaRanks, {}, "ranks of dp_rank " + std::to_string(d)};
      for (int s = 0; s < grid.pp_size; ++s)
        for (int t = 0; t < grid.tp_size; ++t) g.members.push_back(grid.world_rank({d, s, t}));
      groups.push_back(g);
    }
  if (grid.dp_size > 1) {
    RankGroup g{GroupKind::Replicas, {}, "replicas' output ranks"};
    for (int d = 0; d < grid.dp_size; ++d) g.members.push_back(grid.world_rank({d, 0, 0}));
    groups.push_back(g);
  }
  return groups;
}

namespace {

std::string this_host() {
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  return host;
}

}  // namespace

std::vector<std::string> exchange_group_addresses(Rendezvous& world, const std::vector<RankGroup>& groups) {
  const int me = world.rank();
  std::vector<int> ports;  // distinct: a rank leading several groups listens for each on its own port
  size_t leads = 0;
  for (const RankGroup& g : groups) leads += g.members.front() == me ? 1 : 0;
  for (int attempt = 0; ports.size() < leads; ++attempt) {
    TPS_CHECK(attempt < 1000, "rank " + std::to_string(me) + ": cannot find " + std::to_string(leads) + " free TCP ports",
              "check the system's port range (net.ipv4.ip_local_port_range)");
    const int p = find_free_port();
    if (std::find(ports.begin(), ports.end(), p) == ports.end()) ports.push_back(p);
  }
  std::string offer = this_host();
  for (int p : ports) offer += " " + std::to_string(p);
  const std::vector<std::string> offers = world.all_gather(offer);
  std::vector<size_t> used(offers.size(), 0);  // ports of each leader handed out so far
  std::vector<std::string> out;
  for (const RankGroup& g : groups) {
    const int leader = g.members.front();
    std::istringstream in(offers.at(static_cast<size_t>(leader)));
    std::string host;
    in >> host;
    std::vector<std::string> offered;
    for (std::string p; in >> p;) offered.push_back(p);
    const size_t k = used[static_cast<size_t>(leader)]++;
    TPS_CHECK(k < offered.size(), "rank " + std::to_string(me) + ": rank " + std::to_string(leader) + " offered " +
                                      std::to_string(offered.size()) + " ports but leads more groups",
              "every rank must run the same tprun build with the same --tp / --pp / --dp");
    out.push_back((host == this_host() ? std::string("127.0.0.1") : host) + ":" + offered[k]);
  }
  return out;
}

std::unique_ptr<Rendezvous> meet_group(const RankGroup& group, const std::string& address, int world_rank,
                                       double timeout_s) {
  const int index = group.index_of(world_rank);
  TPS_CHECK(index >= 0, "rank " + std::to_string(world_rank) + " is not a member of the " + group.name,
            "this is a bug in the caller (runtime/rank_groups.h)");
  try {
    return std::make_unique<Rendezvous>(address, index, static_cast<int>(group.members.size()), timeout_s);
  } catch (const Error& e) {
    throw Error("rank " + std::to_string(world_rank) + ": the " + group.name + " could not meet: " + e.what(), e.hint());
  }
}

}  // namespace tpshard
