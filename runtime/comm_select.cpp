// comm_select.cpp: choose_comm and the RankCommInfo wire form (see comm_select.h).
#include "runtime/comm_select.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "format/error.h"

namespace tpshard {

const char* comm_kind_name(CommKind k) {
  switch (k) {
    case CommKind::CommKind_Local: return "local";
    case CommKind::CommKind_Peer: return "peer";
    case CommKind::CommKind_Nccl: return "nccl";
  }
  return "?";
}

CommChoice choose_comm(const std::vector<RankCommInfo>& ranks) {
  TPS_CHECK(!ranks.empty(), "choose_comm: no ranks", "this is a bug in tpshard");
  CommChoice c;
  const int n = int(ranks.size());
  for (int r = 0; r < n; ++r)
    if (ranks[r].force_nccl || (n > 1 && ranks[r].no_peer_kernels)) {
      c.kind = CommKind::CommKind_Nccl;
      c.forced = true;
      c.reason = std::string(ranks[r].force_nccl ? "TPSHARD_COMM=nccl" : "TPSHARD_NO_CUSTOM_ALL_REDUCE") +
                 " set on rank " + std::to_string(r);
      return c;
    }
  if (n == 1) {
    c.kind = CommKind::CommKind_Local;
    return c;
  }
  c.kind = CommKind::CommKind_Nccl;
  if (n > kMaxPeerRanks) {
    c.reason = "tp_size " + std::to_string(n) + " > " + std::to_string(kMaxPeerRanks) +
               " (the peer communicator's limit)";
    return c;
  }
  for (int r = 1; r < n; ++r)
    if (ranks[r].host != ranks[0].host) {
      c.reason = "ranks on different hosts (rank 0 on " + ranks[0].host + ", rank " + std::to_string(r) + " on " +
                 ranks[r].host + ")";
      return c;
    }
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) {
      if (i == j || ranks[i].pci_bus_id == ranks[j].pci_bus_id) continue;
      const auto& peers = ranks[i].peer_bus_ids;
      if (std::find(peers.begin(), peers.end(), ranks[j].pci_bus_id) == peers.end()) {
        c.reason = "no peer access from rank " + std::to_string(i) + "'s GPU (" + ranks[i].pci_bus_id +
                   ") to rank " + std::to_string(j) + "'s GPU (" + ranks[j].pci_bus_id + ")";
        return c;
      }
    }
  c.kind = CommKind::CommKind_Peer;
  return c;
}

// Wire form: "tpshard-comm-info 1\n" host "\n" bus "\n" flags "\n", then one peer bus id per line. flags is
// two characters 0/1: force_nccl, no_peer_kernels. Newlines inside fields are replaced by spaces.
namespace {
constexpr const char* kMagic = "tpshard-comm-info 1";

std::string one_line(std::string s) {
  std::replace(s.begin(), s.end(), '\n', ' ');
  return s;
}
}  // namespace

std::string encode_rank_comm_info(const RankCommInfo& info) {
  std::string out = std::string(kMagic) + "\n" + one_line(info.host) + "\n" + one_line(info.pci_bus_id) + "\n" +
                    (info.force_nccl ? "1" : "0") + (info.no_peer_kernels ? "1" : "0") + "\n";
  for (const auto& p : info.peer_bus_ids) out += one_line(p) + "\n";
  return out;
}

RankCommInfo decode_rank_comm_info(const std::string& blob, int rank) {
  std::istringstream in(blob);
  std::string line;
  auto next = [&](const char* what) {
    TPS_CHECK(static_cast<bool>(std::getline(in, line)),
              "communicator selection: rank " + std::to_string(rank) + "'s report has no " + what + " line",
              "every rank must run the same tpshard build");
    return line;
  };
  TPS_CHECK(next("header") == kMagic,
            "communicator selection: rank " + std::to_string(rank) + "'s report starts with '" + line.substr(0, 40) +
                "', expected '" + kMagic + "'",
            "every rank must run the same tpshard build");
  RankCommInfo info;
  info.host = next("host");
  info.pci_bus_id = next("PCI bus id");
  const std::string flags = next("flags");
  TPS_CHECK(flags.size() == 2 && (flags[0] == '0' || flags[0] == '1') && (flags[1] == '0' || flags[1] == '1'),
            "communicator selection: rank " + std::to_string(rank) + "'s flags are '" + flags + "'",
            "every rank must run the same tpshard build");
  info.force_nccl = flags[0] == '1';
  info.no_peer_kernels = flags[1] == '1';
  while (std::getline(in, line))
    if (!line.empty()) info.peer_bus_ids.push_back(line);
  return info;
}

}  // namespace tpshard
