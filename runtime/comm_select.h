// comm_select.h: which device communicator a CUDA job uses, as a pure function of what every rank
// reported (so all ranks reach the same verdict from the same gathered data), and the wire form of
// that report. Rule (docs/RUNTIME.md, "Communicators"): forced NCCL if any rank asks for it; 1 rank ->
// local; all ranks on one host, at most kMaxPeerRanks, every pair of GPUs peers -> peer; else NCCL.
// Does not own: gathering the reports (runtime/cuda/make_device_comm.cpp) or creating communicators.
// No CUDA.
#pragma once
#include <string>
#include <vector>

namespace tpshard {

/// The device communicator kinds (runtime/cuda/device_comm.h).
enum class CommKind {
  CommKind_Local,  ///< tp 1: no communication at all
  CommKind_Peer,   ///< tp 2..8 on one host, GPUs are CUDA peers: our kernels over peer-mapped memory
  CommKind_Nccl,   ///< anything else, and when forced
};

/// "local", "peer", "nccl".
const char* comm_kind_name(CommKind k);

/// Largest number of ranks the peer communicator supports (CustomAllReduce::kMaxRanks).
constexpr int kMaxPeerRanks = 8;

/// What one rank tells the others before the choice.
struct RankCommInfo {
  std::string host;        ///< gethostname()
  std::string pci_bus_id;  ///< this rank's GPU, cudaDeviceGetPCIBusId form ("0000:1B:00.0")
  /// PCI bus ids of the GPUs this rank's GPU can access as a peer (cudaDeviceCanAccessPeer), among the
  /// GPUs visible to this process; its own GPU is implied.
  std::vector<std::string> peer_bus_ids;
  bool force_nccl = false;       ///< TPSHARD_COMM=nccl on this rank (DeviceCommOptions::force_nccl): NCCL at any tp_size
  bool no_peer_kernels = false;  ///< TPSHARD_NO_CUSTOM_ALL_REDUCE=1 on this rank: NCCL when tp_size > 1
};

/// The verdict: kind, and why (empty when it is the expected kind for the job's layout).
struct CommChoice {
  CommKind kind = CommKind::CommKind_Local;
  std::string reason;  ///< for CommKind_Nccl: why not peer ("ranks on different hosts ...", "TPSHARD_COMM=nccl")
  bool forced = false;  ///< NCCL because the environment asked for it
};

/// The choice for ranks[0..size) (pure; every rank calls it with the same gathered vector).
/// Throws Error when ranks is empty.
CommChoice choose_comm(const std::vector<RankCommInfo>& ranks);

/// Serialize / parse RankCommInfo for a HostExchange (text lines; parse throws Error naming the rank on
/// malformed input, e.g. ranks running different tpshard builds).
std::string encode_rank_comm_info(const RankCommInfo& info);
RankCommInfo decode_rank_comm_info(const std::string& blob, int rank);

}  // namespace tpshard
