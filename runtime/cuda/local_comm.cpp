// local_comm.cpp: LocalCommunicator (see local_comm.h).
#include "runtime/cuda/local_comm.h"

#include <cstring>

#include "runtime/cuda/check.h"

namespace tpshard::cuda {

LocalCommunicator::LocalCommunicator(double timeout_s) : timeout_s_(timeout_s) {
  TPS_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
}

LocalCommunicator::~LocalCommunicator() {
  if (stream_) {
    (void)cudaStreamSynchronize(stream_);
    (void)cudaStreamDestroy(stream_);
  }
}

void LocalCommunicator::check_alive() const {
  TPS_CHECK(!aborted_.load(), "rank 0: the local communicator was aborted",
            "an earlier error stopped this rank; see the first error above");
}

void LocalCommunicator::all_reduce_sum(void*, size_t, DType) { check_alive(); }

void LocalCommunicator::all_gather(const void* send, void* recv, size_t count, DType dtype) {
  check_alive();
  const size_t bytes = count * dtype_size(dtype);
  if (bytes == 0 || send == recv) return;
  TPS_CUDA_CHECK(cudaMemcpyAsync(recv, send, bytes, cudaMemcpyDeviceToDevice, stream_));
}

void LocalCommunicator::broadcast(void*, size_t, int root) {
  check_alive();
  TPS_CHECK(root == 0, "local communicator: broadcast from root " + std::to_string(root) + " of 1 rank",
            "this is a bug in the caller");
}

void LocalCommunicator::synchronize() {
  check_alive();
  wait_stream(stream_, timeout_s_, 0, "local stream synchronize", &aborted_);
}

std::vector<uint8_t> LocalCommunicator::all_gather_host(const void* data, size_t bytes) {
  check_alive();
  std::vector<uint8_t> out(bytes);
  if (bytes) std::memcpy(out.data(), data, bytes);
  return out;
}

}  // namespace tpshard::cuda
