// make_device_comm.cpp: make_device_comm and local_comm_info (see make_device_comm.h).
#include "runtime/cuda/make_device_comm.h"

#include <nccl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "runtime/cuda/check.h"
#include "runtime/cuda/local_comm.h"
#include "runtime/cuda/nccl_comm.h"
#include "runtime/cuda/peer_comm.h"

namespace tpshard::cuda {
namespace {

std::string bus_id_of(int device) {
  char id[32] = {};
  TPS_CUDA_CHECK(cudaDeviceGetPCIBusId(id, sizeof(id) - 1, device));
  return id;
}

}  // namespace

RankCommInfo local_comm_info(const DeviceCommOptions& opts) {
  RankCommInfo info;
  info.force_nccl = opts.force_nccl;
  info.no_peer_kernels = !opts.custom_all_reduce;
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  info.host = host;
  int dev = 0, count = 0;
  TPS_CUDA_CHECK(cudaGetDevice(&dev));
  TPS_CUDA_CHECK(cudaGetDeviceCount(&count));
  info.pci_bus_id = bus_id_of(dev);
  for (int d = 0; d < count; ++d) {
    if (d == dev) continue;
    int can = 0;
    if (cudaDeviceCanAccessPeer(&can, dev, d) != cudaSuccess) {
      (void)cudaGetLastError();
      continue;
    }
    if (can) info.peer_bus_ids.push_back(bus_id_of(d));
  }
  return info;
}

std::unique_ptr<DeviceCommunicator> make_device_comm(HostExchange& exchange, const DeviceCommOptions& opts,
                                                     CommChoice* choice_out) {
  const int rank = exchange.rank();
  const int size = exchange.size();
  auto done = [&] {
    if (opts.exchange_done) opts.exchange_done();
  };
  CommChoice choice;
  RankCommInfo mine = local_comm_info(opts);
  if (size == 1) {
    choice = choose_comm({mine});  // no exchange: one rank
  } else {
    const std::vector<std::string> blobs = exchange.all_gather(encode_rank_comm_info(mine));
    std::vector<RankCommInfo> all;
    for (int r = 0; r < size; ++r) all.push_back(decode_rank_comm_info(blobs[size_t(r)], r));
    choice = choose_comm(all);
  }
  std::unique_ptr<DeviceCommunicator> comm;
  if (choice.kind == CommKind::CommKind_Local) {
    comm = std::make_unique<LocalCommunicator>(opts.timeout_s);
  } else if (choice.kind == CommKind::CommKind_Peer) {
    std::string why;
    comm = PeerCommunicator::try_create(exchange, opts.timeout_s, &why);
    if (!comm) {
      choice.kind = CommKind::CommKind_Nccl;
      choice.reason = "the peer communicator could not be set up: " + why;
    }
  }
  if (choice.kind == CommKind::CommKind_Nccl) {
    // A fallback on one host costs NCCL's ~0.5 GiB per GPU: say why (multi-host and forced NCCL are expected).
    const bool expected = choice.forced || choice.reason.rfind("ranks on different hosts", 0) == 0;
    if (opts.note_fallback && rank == 0 && !expected)
      std::fprintf(stderr, "note: tp_size %d uses NCCL (%s)\n", size, choice.reason.c_str());
    setenv("NCCL_NVLS_ENABLE", "0", /*overwrite=*/0);  // before the first NCCL call
    ncclUniqueId id{};
    std::string blob;
    if (rank == 0) {
      TPS_NCCL_CHECK(ncclGetUniqueId(&id));
      blob.assign(reinterpret_cast<const char*>(&id), sizeof(id));
    }
    blob = exchange.broadcast(blob, 0);
    TPS_CHECK(blob.size() == sizeof(id), "rank " + std::to_string(rank) + ": malformed NCCL id from rank 0",
              "every rank must run the same tpshard build");
    std::memcpy(&id, blob.data(), sizeof(id));
    done();
    comm = std::make_unique<NcclCommunicator>(id, rank, size, opts.timeout_s);
  } else {
    done();
  }
  if (choice_out) *choice_out = choice;
  return comm;
}

}  // namespace tpshard::cuda
