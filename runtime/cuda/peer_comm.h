// peer_comm.h: the DeviceCommunicator for 2..8 ranks on one host whose GPUs are CUDA peers (NVLink), with
// no NCCL: every collective is one of our kernels over CustomAllReduce's IPC / peer-mapped regions
// (custom_all_reduce.cu for the protocol, peer_kernels.h for the kernels). Saves NCCL's ~0.5 GiB per GPU
//. Owns: its stream, the regions (through a CustomAllReduce), chunking of long messages, a
// device scratch for all_gather_host. Does not own: deciding that it can be used (make_device_comm.h).
#pragma once
#include <cuda_runtime.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/cuda/custom_all_reduce.h"
#include "runtime/cuda/device_comm.h"
#include "runtime/host_exchange.h"

namespace tpshard::cuda {

/// Peer communicator of tp_size ranks (2..8), ranks as processes (CUDA IPC) or as threads of one process
/// (peer access). Collectives enqueue on stream() without host waits and are capturable in CUDA graphs;
/// each moves at most staging_bytes per kernel, longer messages take several kernels (still one call).
/// all_reduce_sum sums in fp32 in rank order and rounds once (bitwise identical on all ranks).
/// A kernel that waits longer than TPSHARD_CUSTOM_ALL_REDUCE_TIMEOUT_S (default 300 s) for a peer traps,
/// so a dead peer turns into a CUDA error at the next synchronize() instead of a hang.
class PeerCommunicator : public DeviceCommunicator {
 public:
  /// Default staging per rank and parity: 4 MiB (the region is 2 x 4 MiB + 1 KiB per GPU). Decode
  /// messages (<= max_batch x hidden x 4 bytes) take one kernel; a 12 MiB prefill all_reduce takes three.
  static constexpr size_t kDefaultStagingBytes = size_t(4) << 20;

  /// Collective over `exchange` on the current device (call cudaSetDevice first): creates the stream and
  /// the regions. Returns nullptr on EVERY rank, with *why_not, when the regions cannot be set up (no peer
  /// access, IPC failure, tp_size outside 2..8); throws Error when the exchange itself fails.
  /// staging_bytes is rounded up to 16 and must be equal on all ranks.
  static std::unique_ptr<PeerCommunicator> try_create(HostExchange& exchange, double timeout_s,
                                                      std::string* why_not,
                                                      size_t staging_bytes = kDefaultStagingBytes);
  /// Best effort, unless aborted or unwinding an exception: a barrier (so no peer still reads this
  /// rank's region), then frees the region and the stream.
  ~PeerCommunicator() override;
  PeerCommunicator(const PeerCommunicator&) = delete;
  PeerCommunicator& operator=(const PeerCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  /// Any count (0: nothing), F32/F16/BF16, buf aligned to the element size.
  void all_reduce_sum(void* buf, size_t count, DType dtype) override;
  /// recv[r * count + i] = send of rank r [i]; any byte count and alignment; recv must not overlap send
  /// except in place (send == recv + rank * count).
  void all_gather(const void* send, void* recv, size_t count, DType dtype) override;
  void broadcast(void* buf, size_t bytes, int root) override;
  /// A device handshake of all ranks, then synchronize().
  void barrier() override;
  void synchronize() override;
  std::vector<uint8_t> all_gather_host(const void* data, size_t bytes) override;
  void abort() override { aborted_.store(true); }
  const char* name() const override { return "peer"; }
  cudaStream_t stream() const override { return stream_; }

  size_t staging_bytes() const { return regions_.data_bytes; }  ///< largest message bytes per kernel
  /// The CustomAllReduce whose regions this communicator uses (owned here; valid while it lives). Its
  /// calls (the one-shot all_reduce, the fused all_reduce + add_norm) may be mixed freely with this
  /// communicator's, on stream(): they follow the same protocol on the same regions.
  CustomAllReduce* custom_all_reduce() const { return car_.get(); }

 private:
  PeerCommunicator() = default;
  /// Throws once aborted, or when called on another device than the one of creation.
  void check_usable(const char* what) const;
  /// Enqueue the gather kernel for `bytes` (split into staging-sized pieces).
  void gather(const void* send, void* recv, size_t bytes, size_t recv_stride, int root);

  int rank_ = 0;
  int size_ = 0;
  double timeout_s_ = 300.0;
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<CustomAllReduce> car_;  ///< owns the regions; its one-shot kernel serves eligible messages
  PeerRegions regions_;
  DeviceScratch scratch_;  ///< for all_gather_host
  std::atomic<bool> aborted_{false};
};

}  // namespace tpshard::cuda
