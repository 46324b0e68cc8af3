// nccl_comm.cpp: NcclCommunicator (see nccl_comm.h). Non-blocking NCCL communicator so that init
// and every enqueue can be polled with a timeout instead of hanging (NCCL docs, "Fault tolerance").
#include "runtime/cuda/nccl_comm.h"

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "runtime/cuda/check.h"

namespace tpshard::cuda {

ncclDataType_t nccl_dtype(DType t) {
  switch (t) {
    case DType::F32: return ncclFloat32;
    case DType::F16: return ncclFloat16;
    case DType::BF16: return ncclBfloat16;
  }
  throw Error("nccl_dtype: unknown dtype " + std::to_string(int(t)), "this is a bug in tpshard");
}

NcclCommunicator::NcclCommunicator(const ncclUniqueId& id, int rank, int size, double timeout_s)
    : rank_(rank), size_(size), timeout_s_(timeout_s) {
  TPS_CHECK(size >= 1 && rank >= 0 && rank < size,
            "NcclCommunicator: rank " + std::to_string(rank) + " out of range for size " + std::to_string(size),
            "this is a bug in the launcher");
  setenv("NCCL_NVLS_ENABLE", "0", /*overwrite=*/0);  // NVLink multicast stays off on our machines
  // Decode all_reduces go through the custom one-shot kernel (custom_all_reduce.h); NCCL carries prefill
  // and the small gathers. Measured on 2 x H200 (docs/BENCHMARKS.md, memory table): 8 channels of 1 MiB
  // buffers take 0.50 GiB per GPU instead of 0.84 GiB, for 4% less prefill throughput at GPT-NeoX-20B
  // width. Both stay overridable from the environment.
  setenv("NCCL_MAX_NCHANNELS", "8", /*overwrite=*/0);
  setenv("NCCL_BUFFSIZE", "1048576", /*overwrite=*/0);
  TPS_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  TPS_NCCL_CHECK(ncclCommInitRankConfig(&comm_, size, id, rank, &config));
  wait_ready("ncclCommInitRankConfig");
}

NcclCommunicator::~NcclCommunicator() {
  if (comm_) {
    if (!aborted_.load()) {
      // Flush, then destroy; never hang at exit: poll the finalize with the same timeout.
      ncclResult_t st = ncclCommFinalize(comm_);
      auto start = std::chrono::steady_clock::now();
      while (st == ncclInProgress) {
        if (ncclCommGetAsyncError(comm_, &st) != ncclSuccess) break;
        if (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() > 10.0) break;
        if (st == ncclInProgress) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      if (st == ncclSuccess) {
        ncclCommDestroy(comm_);
      } else {
        ncclCommAbort(comm_);
      }
    }
  }
  if (stream_) cudaStreamDestroy(stream_);
}

void NcclCommunicator::abort() {
  bool expected = false;
  if (comm_ && aborted_.compare_exchange_strong(expected, true)) ncclCommAbort(comm_);
}

void NcclCommunicator::check_alive() const {
  TPS_CHECK(!aborted_.load(), "rank " + std::to_string(rank_) + ": the NCCL communicator was aborted",
            "another rank failed or a collective timed out; see the first error above");
}

void NcclCommunicator::wait_ready(const char* what) {
  auto start = std::chrono::steady_clock::now();
  for (;;) {
    TPS_CHECK(!aborted_.load(), "rank " + std::to_string(rank_) + ": NCCL communicator was aborted (" + what + ")",
              "another rank failed; see its message");
    ncclResult_t st = ncclSuccess;
    TPS_NCCL_CHECK(ncclCommGetAsyncError(comm_, &st));
    if (st == ncclSuccess) return;
    if (st != ncclInProgress) {
      std::string detail = std::string(ncclGetErrorString(st)) + " (" + ncclGetLastError(comm_) + ")";
      abort();
      throw Error("rank " + std::to_string(rank_) + ": NCCL error in " + what + " (" + check_where() + "): " + detail,
                  "a peer rank probably failed or the network is down; set NCCL_DEBUG=WARN for details");
    }
    double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (waited > timeout_s_) {
      abort();
      throw Error("rank " + std::to_string(rank_) + ": " + what + " did not finish in " +
                      std::to_string(int(timeout_s_)) + " s (" + check_where() + ")",
                  "some rank is not running or cannot reach the others; set TPRUN_NCCL_TIMEOUT (seconds) to wait longer");
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

void NcclCommunicator::all_reduce_sum(void* buf, size_t count, DType dtype) {
  check_alive();
  TPS_NCCL_CHECK(ncclAllReduce(buf, buf, count, nccl_dtype(dtype), ncclSum, comm_, stream_));
  wait_ready("ncclAllReduce");
}

void NcclCommunicator::all_gather(const void* send, void* recv, size_t count, DType dtype) {
  check_alive();
  TPS_NCCL_CHECK(ncclAllGather(send, recv, count, nccl_dtype(dtype), comm_, stream_));
  wait_ready("ncclAllGather");
}

void NcclCommunicator::broadcast(void* buf, size_t bytes, int root) {
  check_alive();
  TPS_NCCL_CHECK(ncclBroadcast(buf, buf, bytes, ncclUint8, root, comm_, stream_));
  wait_ready("ncclBroadcast");
}

void NcclCommunicator::synchronize() {
  check_alive();
  // Busy-poll for the first few milliseconds (a decode step ends here every 1-3 ms, and a sleep of 50 us
  // costs up to ~100 us with Linux timer slack, several % of a batch-1 step), then poll every 50 us.
  constexpr double kSpinSeconds = 0.005;
  auto start = std::chrono::steady_clock::now();
  for (unsigned it = 0;; ++it) {
    cudaError_t q = cudaStreamQuery(stream_);
    if (q == cudaSuccess) return;
    if (q != cudaErrorNotReady) TPS_CUDA_CHECK(q);
    double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (waited < kSpinSeconds && it % 64 != 0) continue;
    ncclResult_t st = ncclSuccess;
    TPS_NCCL_CHECK(ncclCommGetAsyncError(comm_, &st));
    if (st != ncclSuccess && st != ncclInProgress) wait_ready("stream synchronize");  // throws with detail
    if (waited < kSpinSeconds) continue;
    if (waited > timeout_s_) {
      abort();
      throw Error("rank " + std::to_string(rank_) + ": collectives did not complete in " +
                      std::to_string(int(timeout_s_)) + " s (" + check_where() + ")",
                  "a peer rank is stuck or gone; set TPRUN_NCCL_TIMEOUT (seconds) to wait longer");
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

void NcclCommunicator::barrier() {
  float* const one = static_cast<float*>(scratch_.get(sizeof(float), *this));
  TPS_CUDA_CHECK(cudaMemsetAsync(one, 0, sizeof(float), stream_));
  all_reduce_sum(one, 1, DType::F32);
  synchronize();
}

std::vector<uint8_t> NcclCommunicator::all_gather_host(const void* data, size_t bytes) {
  check_alive();
  return all_gather_host_staged(*this, scratch_, data, bytes, [&](const uint8_t* send, uint8_t* recv) {
    TPS_NCCL_CHECK(ncclAllGather(send, recv, bytes, ncclUint8, comm_, stream_));
    wait_ready("ncclAllGather (host)");
  });
}

}  // namespace tpshard::cuda
