// nccl_comm.h: the CUDA backend's DeviceCommunicator (device_comm.h) over NCCL, one process per GPU (or
// ranks as threads); used for multi-host jobs and when TPSHARD_COMM=nccl (make_device_comm.h).
// Owns: communicator creation from a unique id (non-blocking NCCL config, init polled with a timeout),
// the compute stream every collective is enqueued on, asynchronous-error polling, abort.
// Does not own: exchanging the unique id (runtime/rendezvous.h), choosing the device (cuda_session).
#pragma once
#include <cuda_runtime.h>
#include <nccl.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/cuda/device_comm.h"

namespace tpshard::cuda {

/// NCCL communicator of tp_size ranks. All buffers passed to the Communicator methods are DEVICE
/// pointers; the collectives are enqueued on stream() and return without waiting (stream order).
/// barrier() and all_gather_host() wait. Any NCCL failure throws Error naming the rank and the call.
class NcclCommunicator : public DeviceCommunicator {
 public:
  /// Create rank `rank` of `size` on the current device (call cudaSetDevice first). Sets
  /// NCCL_NVLS_ENABLE=0, NCCL_MAX_NCHANNELS=8 and NCCL_BUFFSIZE=1 MiB when unset (memory; see the .cpp). Waits at most timeout_s for the other ranks to join, then throws
  /// Error ("rank r: NCCL init did not finish in N s ...").
  NcclCommunicator(const ncclUniqueId& id, int rank, int size, double timeout_s = 300.0);
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void all_reduce_sum(void* buf, size_t count, DType dtype) override;
  void all_gather(const void* send, void* recv, size_t count, DType dtype) override;
  void broadcast(void* buf, size_t bytes, int root) override;
  /// All ranks reach this point and the stream is drained (polls for errors; timeout as above).
  void barrier() override;

  /// Wait until all work on stream() is done, polling ncclCommGetAsyncError; throws Error on an NCCL
  /// error or after timeout_s without completion (then the communicator is aborted).
  void synchronize() override;
  /// Gather `bytes` of HOST memory from every rank: result[r * bytes + i] (synchronous; for small
  /// reports such as bench-load's per-rank numbers).
  std::vector<uint8_t> all_gather_host(const void* data, size_t bytes) override;

  cudaStream_t stream() const override { return stream_; }  ///< the compute stream (non-blocking flag)
  ncclComm_t nccl() const { return comm_; }
  /// ncclCommAbort; safe from another thread (watchdog). Later calls throw.
  void abort() override;
  const char* name() const override { return "nccl"; }

 private:
  /// Poll ncclCommGetAsyncError until the communicator is no longer in progress (non-blocking mode).
  void wait_ready(const char* what);
  /// Throws Error once abort() was called (the ncclComm_t is gone then).
  void check_alive() const;

  int rank_ = 0;
  int size_ = 1;
  double timeout_s_ = 300.0;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  DeviceScratch scratch_;  ///< for barrier / all_gather_host
  std::atomic<bool> aborted_{false};
};

/// ncclDataType_t of a DType.
ncclDataType_t nccl_dtype(DType t);

}  // namespace tpshard::cuda
