// local_comm.h: the DeviceCommunicator of a tp 1 job: no NCCL, no peers, no staging memory.
#pragma once
#include <cuda_runtime.h>

#include <atomic>

#include "runtime/cuda/device_comm.h"

namespace tpshard::cuda {

/// One rank on the current device. all_reduce_sum and broadcast do nothing, all_gather is one device copy
/// (none in place), barrier() and synchronize() wait for the stream (with the timeout).
class LocalCommunicator : public DeviceCommunicator {
 public:
  /// Creates the compute stream on the current device.
  explicit LocalCommunicator(double timeout_s = 300.0);
  ~LocalCommunicator() override;
  LocalCommunicator(const LocalCommunicator&) = delete;
  LocalCommunicator& operator=(const LocalCommunicator&) = delete;

  int rank() const override { return 0; }
  int size() const override { return 1; }
  void all_reduce_sum(void* buf, size_t count, DType dtype) override;
  void all_gather(const void* send, void* recv, size_t count, DType dtype) override;
  void broadcast(void* buf, size_t bytes, int root) override;
  void barrier() override { synchronize(); }
  void synchronize() override;
  std::vector<uint8_t> all_gather_host(const void* data, size_t bytes) override;
  void abort() override { aborted_.store(true); }
  const char* name() const override { return "local"; }
  cudaStream_t stream() const override { return stream_; }

 private:
  void check_alive() const;

  double timeout_s_;
  cudaStream_t stream_ = nullptr;
  std::atomic<bool> aborted_{false};
};

}  // namespace tpshard::cuda
