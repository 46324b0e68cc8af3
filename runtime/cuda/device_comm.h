// device_comm.h: the communicator interface the CUDA backend needs on top of runtime/comm.h, and helpers
// shared by its implementations.
// Implementations: NcclCommunicator (nccl_comm.h; multi-host, or forced), PeerCommunicator (peer_comm.h;
// 2..8 GPUs of one host that are CUDA peers), LocalCommunicator (local_comm.h; tp 1). Which one a job
// uses: make_device_comm.h. Does not own: choosing, creating NCCL ids, the host exchange (host_exchange.h).
#pragma once
#include <cuda_runtime.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "runtime/comm.h"
#include "runtime/host_exchange.h"

namespace tpshard::cuda {

/// A Communicator whose buffers are DEVICE pointers of the current device and whose collectives are
/// enqueued on stream() (no host wait, stream order; capturable in CUDA graphs for all_reduce_sum and
/// all_gather). barrier(), synchronize() and all_gather_host() wait on the host.
class DeviceCommunicator : public Communicator {
 public:
  /// The compute stream (non-blocking flag) every collective is enqueued on; owned by the communicator.
  virtual cudaStream_t stream() const = 0;
  /// Wait until all work on stream() is done, busy-polling; throws Error naming the rank on a CUDA/NCCL
  /// error or after the communicator's timeout (then the communicator is aborted).
  virtual void synchronize() = 0;
  /// Gather `bytes` of HOST memory from every rank: result[r * bytes + i] (synchronous; small reports).
  virtual std::vector<uint8_t> all_gather_host(const void* data, size_t bytes) = 0;
  /// Mark the communicator dead (safe from another thread, e.g. a watchdog): later calls throw Error.
  virtual void abort() = 0;
  /// "nccl", "peer" or "local" (logs, benchmark reports).
  virtual const char* name() const = 0;
};

/// Busy-poll `stream` until it is idle: spins for the first 5 ms (a decode step ends here every 1-3 ms;
/// sleeping costs timer slack), then polls every 50 us. Throws Error("rank r: <what> did not complete in
/// N s ...") after timeout_s, or the CUDA error of the stream (e.g. a trapped kernel).
/// `aborted` (optional) is checked while waiting: once true, throws at once.
void wait_stream(cudaStream_t stream, double timeout_s, int rank, const char* what,
                 const std::atomic<bool>* aborted = nullptr);

/// A device buffer of a communicator's host-side helpers (barrier, all_gather_host), grown on demand.
class DeviceScratch {
 public:
  DeviceScratch() = default;
  DeviceScratch(const DeviceScratch&) = delete;
  DeviceScratch& operator=(const DeviceScratch&) = delete;
  ~DeviceScratch();
  /// At least `bytes` of device memory. Growing first waits for comm.synchronize() (an earlier call on
  /// comm.stream() may still use the old buffer), then frees it. Throws Error on a CUDA failure.
  void* get(size_t bytes, DeviceCommunicator& comm);

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

/// all_gather_host through device memory, for communicators whose collectives take device buffers:
/// uploads `data` into `scratch` on comm.stream(), calls gather(send, recv) to enqueue the device
/// all_gather (rank r's `bytes` at recv + r * bytes), downloads and comm.synchronize()s. Returns
/// result[r * bytes + i]; empty for bytes 0 (every rank passes the same bytes, so no rank gathers).
std::vector<uint8_t> all_gather_host_staged(DeviceCommunicator& comm, DeviceScratch& scratch, const void* data,
                                            size_t bytes,
                                            const std::function<void(const uint8_t* send, uint8_t* recv)>& gather);

/// A HostExchange over a DeviceCommunicator's all_gather_host (for code that only has the communicator,
/// e.g. CustomAllReduce on the NCCL path). Two rounds per all_gather: lengths, then padded blobs.
class CommHostExchange : public HostExchange {
 public:
  explicit CommHostExchange(DeviceCommunicator& comm) : comm_(comm) {}
  int rank() const override { return comm_.rank(); }
  int size() const override { return comm_.size(); }
  std::vector<std::string> all_gather(const std::string& mine) override;

 private:
  DeviceCommunicator& comm_;
};

}  // namespace tpshard::cuda
