// peer_comm.cpp: PeerCommunicator (see peer_comm.h): creation, chunking of long messages into
// staging-sized kernels, host gathers through a device scratch, teardown.
#include "runtime/cuda/peer_comm.h"

#include <algorithm>
#include <cstring>
#include <exception>

#include "runtime/cuda/check.h"
#include "runtime/cuda/peer_kernels.h"

namespace tpshard::cuda {

std::unique_ptr<PeerCommunicator> PeerCommunicator::try_create(HostExchange& exchange, double timeout_s,
                                                               std::string* why_not, size_t staging_bytes) {
  std::unique_ptr<PeerCommunicator> pc(new PeerCommunicator());
  pc->rank_ = exchange.rank();
  pc->size_ = exchange.size();
  pc->timeout_s_ = timeout_s;
  TPS_CUDA_CHECK(cudaStreamCreateWithFlags(&pc->stream_, cudaStreamNonBlocking));
  const size_t staging = std::max<size_t>(16, (staging_bytes + 15) / 16 * 16);
  std::string why;
  pc->car_ = CustomAllReduce::try_create(exchange, pc->stream_, staging, &why);  // collective
  if (!pc->car_) {
    if (why_not) *why_not = why;
    return nullptr;  // every rank gets here together (CustomAllReduce's verdict exchange)
  }
  pc->regions_ = pc->car_->regions();
  return pc;
}

PeerCommunicator::~PeerCommunicator() {
  // A peer may read this rank's region until its last call completed on every rank, so the region is
  // freed only after a barrier. After an abort or during unwinding (a rank failed), some kernel on the
  // stream may be spinning for a peer that never comes, and cudaFree would wait for it (up to the spin
  // timeout): then the region and the stream are left to the process exit instead.
  if (!car_) {  // try_create failed: nothing was shared
    if (stream_) (void)cudaStreamDestroy(stream_);
    return;
  }
  bool clean = !aborted_.load() && std::uncaught_exceptions() == 0;
  if (clean) {
    try {
      barrier();
    } catch (...) {
      clean = false;
    }
  }
  if (!clean) {
    (void)car_.release();  // leaked on purpose (see above)
    return;
  }
  car_.reset();
  if (stream_) (void)cudaStreamDestroy(stream_);
}

void PeerCommunicator::check_usable(const char* what) const {
  TPS_CHECK(!aborted_.load(), "rank " + std::to_string(rank_) + ": the peer communicator was aborted (" + what + ")",
            "another rank failed or a collective timed out; see the first error above");
  int dev = -1;
  TPS_CUDA_CHECK(cudaGetDevice(&dev));
  TPS_CHECK(dev == regions_.device,
            "rank " + std::to_string(rank_) + ": peer communicator " + what + " called on device " +
                std::to_string(dev) + ", created on device " + std::to_string(regions_.device),
            "call cudaSetDevice for this rank's GPU first");
}

void PeerCommunicator::all_reduce_sum(void* buf, size_t count, DType dtype) {
  check_usable("all_reduce_sum");
  if (count == 0) return;  // every rank passes the same count: no kernel on any rank
  const size_t elem = dtype_size(dtype);
  TPS_CHECK(buf != nullptr && reinterpret_cast<uintptr_t>(buf) % elem == 0,
            "rank " + std::to_string(rank_) + ": peer all_reduce_sum: buffer " +
                std::to_string(reinterpret_cast<uintptr_t>(buf)) + " is not aligned to " + std::to_string(elem) +
                " bytes (" + dtype_name(dtype) + ")",
            "pass a device pointer to whole elements");
  if (car_->eligible(buf, count, dtype)) {  // the one-shot kernel (same staging layout and chunking)
    car_->all_reduce_sum(buf, count, dtype, stream_);
    return;
  }
  const size_t chunk = regions_.data_bytes / elem;  // a multiple of 16 / elem: later chunks keep alignment
  uint8_t* p = static_cast<uint8_t*>(buf);
  for (size_t done = 0; done < count; done += chunk) {
    const size_t n = std::min(chunk, count - done);
    TPS_CUDA_CHECK(launch_peer_all_reduce(regions_, p + done * elem, n, dtype, stream_));
  }
}

void PeerCommunicator::gather(const void* send, void* recv, size_t bytes, size_t recv_stride, int root) {
  const uint8_t* s = static_cast<const uint8_t*>(send);
  uint8_t* d = static_cast<uint8_t*>(recv);
  const size_t chunk = regions_.data_bytes;
  for (size_t done = 0; done < bytes; done += chunk) {
    const size_t n = std::min(chunk, bytes - done);
    TPS_CUDA_CHECK(launch_peer_gather(regions_, s + done, d + done, n, recv_stride, root, stream_));
  }
}

void PeerCommunicator::all_gather(const void* send, void* recv, size_t count, DType dtype) {
  check_usable("all_gather");
  const size_t bytes = count * dtype_size(dtype);
  if (bytes == 0) return;
  gather(send, recv, bytes, bytes, -1);
}

void PeerCommunicator::broadcast(void* buf, size_t bytes, int root) {
  check_usable("broadcast");
  TPS_CHECK(root >= 0 && root < size_,
            "rank " + std::to_string(rank_) + ": peer broadcast from root " + std::to_string(root) + " of " +
                std::to_string(size_) + " ranks",
            "this is a bug in the caller");
  if (bytes == 0) return;
  gather(buf, buf, bytes, 0, root);
}

void PeerCommunicator::barrier() {
  check_usable("barrier");
  TPS_CUDA_CHECK(launch_peer_gather(regions_, nullptr, nullptr, 0, 0, -1, stream_));
  synchronize();
}

void PeerCommunicator::synchronize() {
  TPS_CHECK(!aborted_.load(), "rank " + std::to_string(rank_) + ": the peer communicator was aborted",
            "another rank failed or a collective timed out; see the first error above");
  try {
    wait_stream(stream_, timeout_s_, rank_, "peer collectives", &aborted_);
  } catch (...) {
    aborted_.store(true);  // a timeout or a trapped kernel: the stream is unusable
    throw;
  }
}

std::vector<uint8_t> PeerCommunicator::all_gather_host(const void* data, size_t bytes) {
  check_usable("all_gather_host");
  return all_gather_host_staged(*this, scratch_, data, bytes,
                                [&](const uint8_t* send, uint8_t* recv) { gather(send, recv, bytes, bytes, -1); });
}

}  // namespace tpshard::cuda
