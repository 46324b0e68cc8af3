// make_device_comm.h: the one place that picks and creates a job's DeviceCommunicator (CudaWorker,
// tools/bench_generate, tools/bench_kernels, the GPU tests). Rule: runtime/comm_select.h.
// NCCL is not touched at all (not even ncclGetUniqueId) unless NCCL is chosen.
#pragma once
#include <functional>
#include <memory>

#include "runtime/comm_select.h"
#include "runtime/cuda/device_comm.h"
#include "runtime/host_exchange.h"

namespace tpshard::cuda {

struct DeviceCommOptions {
  double timeout_s = 300.0;  ///< waits for peers: NCCL init, collectives, synchronize()
  /// Called once the exchange is no longer needed and before any long wait (NCCL init): CudaWorker
  /// starts its rendezvous failure monitor here (the rendezvous exchange only works before that).
  std::function<void()> exchange_done;
  /// Print the note when a one-host job falls back to NCCL (on rank 0, stderr).
  bool note_fallback = true;
  bool force_nccl = false;         ///< NCCL at any tp_size (TPSHARD_COMM=nccl, Tuning::force_nccl)
  bool custom_all_reduce = true;   ///< false: NCCL when tp_size > 1 (TPSHARD_NO_CUSTOM_ALL_REDUCE=1)
};

/// Collective over `exchange` (rank / size from it), on the current device (cudaSetDevice first).
/// tp 1 -> LocalCommunicator; one host, <= 8 ranks, every pair of GPUs peers -> PeerCommunicator; else
/// (or TPSHARD_COMM=nccl on any rank) NcclCommunicator, its unique id made by rank 0 and broadcast
/// through `exchange`. When the peer setup fails on some rank (IPC), every rank falls back to NCCL.
/// Every rank gets the same kind. Throws Error naming the rank when the exchange or NCCL fails.
/// `choice` (optional) receives the verdict (kind, reason).
std::unique_ptr<DeviceCommunicator> make_device_comm(HostExchange& exchange, const DeviceCommOptions& opts = {},
                                                     CommChoice* choice = nullptr);

/// This rank's report for choose_comm: hostname, PCI bus id of the current device, the bus ids of the
/// visible devices it can access as peers, and opts.force_nccl / opts.custom_all_reduce.
RankCommInfo local_comm_info(const DeviceCommOptions& opts = {});

}  // namespace tpshard::cuda
