// device_comm.cpp: wait_stream, DeviceScratch, all_gather_host_staged and CommHostExchange (see device_comm.h).
#include "runtime/cuda/device_comm.h"

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>

#include "runtime/cuda/check.h"

namespace tpshard::cuda {

void wait_stream(cudaStream_t stream, double timeout_s, int rank, const char* what,
                 const std::atomic<bool>* aborted) {
  constexpr double kSpinSeconds = 0.005;
  const auto start = std::chrono::steady_clock::now();
  for (unsigned it = 0;; ++it) {
    const cudaError_t q = cudaStreamQuery(stream);
    if (q == cudaSuccess) return;
    if (q != cudaErrorNotReady) TPS_CUDA_CHECK(q);
    if (it % 64 != 0) continue;
    TPS_CHECK(aborted == nullptr || !aborted->load(),
              "rank " + std::to_string(rank) + ": the communicator was aborted while waiting (" + what + ")",
              "another rank failed or a collective timed out; see the first error above");
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (waited < kSpinSeconds) continue;
    TPS_CHECK(waited <= timeout_s,
              "rank " + std::to_string(rank) + ": " + what + " did not complete in " + std::to_string(int(timeout_s)) +
                  " s (" + check_where() + ")",
              "a peer rank is stuck or gone; set TPRUN_NCCL_TIMEOUT (seconds) to wait longer");
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

DeviceScratch::~DeviceScratch() {
  if (ptr_) (void)cudaFree(ptr_);
}

void* DeviceScratch::get(size_t bytes, DeviceCommunicator& comm) {
  if (bytes_ >= bytes && ptr_) return ptr_;
  comm.synchronize();
  if (ptr_) TPS_CUDA_CHECK(cudaFree(ptr_));
  ptr_ = nullptr;
  bytes_ = 0;
  TPS_CUDA_CHECK(cudaMalloc(&ptr_, bytes));
  bytes_ = bytes;
  return ptr_;
}

std::vector<uint8_t> all_gather_host_staged(DeviceCommunicator& comm, DeviceScratch& scratch, const void* data,
                                            size_t bytes,
                                            const std::function<void(const uint8_t* send, uint8_t* recv)>& gather) {
  if (bytes == 0) return {};
  const size_t n = size_t(comm.size());
  uint8_t* const send = static_cast<uint8_t*>(scratch.get(bytes * (n + 1), comm));
  uint8_t* const recv = send + bytes;
  TPS_CUDA_CHECK(cudaMemcpyAsync(send, data, bytes, cudaMemcpyHostToDevice, comm.stream()));
  gather(send, recv);
  std::vector<uint8_t> out(bytes * n);
  TPS_CUDA_CHECK(cudaMemcpyAsync(out.data(), recv, out.size(), cudaMemcpyDeviceToHost, comm.stream()));
  comm.synchronize();
  return out;
}

std::vector<std::string> CommHostExchange::all_gather(const std::string& mine) {
  const int n = comm_.size();
  const uint64_t len = mine.size();
  const std::vector<uint8_t> lens = comm_.all_gather_host(&len, sizeof(len));
  uint64_t longest = 0;
  std::vector<uint64_t> each(size_t(n), 0);
  for (int r = 0; r < n; ++r) {
    std::memcpy(&each[size_t(r)], lens.data() + size_t(r) * sizeof(uint64_t), sizeof(uint64_t));
    longest = each[size_t(r)] > longest ? each[size_t(r)] : longest;
  }
  std::vector<std::string> out(static_cast<size_t>(n));
  if (longest == 0) return out;
  std::string padded = mine;
  padded.resize(size_t(longest), '\0');
  const std::vector<uint8_t> all = comm_.all_gather_host(padded.data(), size_t(longest));
  for (int r = 0; r < n; ++r)
    out[size_t(r)].assign(reinterpret_cast<const char*>(all.data()) + size_t(r) * longest, size_t(each[size_t(r)]));
  return out;
}

}  // namespace tpshard::cuda
