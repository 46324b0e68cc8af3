// custom_all_reduce.h: one-shot all_reduce over NVLink for the small messages of decode (issue 7).
// Owns: the per-rank IPC-shared staging region (double-buffered data + flags + call counters), mapping the
// peers' regions (CUDA IPC across processes, peer access within one process), and the one-kernel
// in-place sum. Does not own: choosing between it and NCCL (the transformer's all_reduce does that),
// the communicator itself (nccl_comm.h; used here only to exchange handles at creation).
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "format/dtype.h"
#include "runtime/cuda/nccl_comm.h"

namespace tpshard::cuda {

/// In-place all_reduce (sum) for tp ranks whose GPUs are peers on one host (NVLink), done by ONE kernel per
/// call: every rank copies its message into its own staging buffer, signals the peers, and reads and sums
/// the peers' staging buffers directly (the "one-shot" technique of vLLM's custom all-reduce and
/// TensorRT-LLM's one-shot all-reduce; this is our own implementation, see docs/RUNTIME.md "custom
/// all_reduce" for the protocol and why reusing a staging buffer every second call is safe).
///
/// Collective object: every rank of the communicator creates it (same max_bytes), every rank makes the same
/// all_reduce_sum calls in the same order (same count and dtype), and every rank destroys it only after
/// its streams are drained (e.g. after comm.barrier()): a peer may still read this rank's region until then.
///
/// Preconditions: the calls of one rank are stream-ordered (one stream, or streams ordered by events), and
/// every kernel launched on it with programmatic dependent launch (kernels/pdl.cuh) calls griddep_wait()
/// in every block before it exits (one that skips it breaks stream order, for this kernel as for any
/// other). Blocks of the kernel spin on flags: all kBlocks blocks must be able to run at the same time on
/// each GPU (32 x 512 threads: true on any GPU we target).
/// A kernel that waits longer than TPSHARD_CUSTOM_ALL_REDUCE_TIMEOUT_S seconds (default 300; 0 = forever)
/// for a peer prints "custom all_reduce: rank r block b waited ..." and traps (the stream reports
/// cudaErrorLaunchFailure) instead of hanging when a peer rank died.
class CustomAllReduce {
 public:
  static constexpr int kMaxRanks = 8;   ///< largest tp_size supported
  static constexpr int kBlocks = 32;    ///< blocks of every launch (fixed: see the protocol)
  static constexpr int kThreads = 512;  ///< threads per block

  /// Collective over the ranks of `comm` (every rank constructs it, same max_bytes). Allocates on the
  /// current device one IPC-shareable region of 2 x max_bytes (rounded up to 16) of data + flags + call
  /// counters, zeroes it, exchanges (hostname, pid, device ordinal, PCI bus id, cudaIpcMemHandle_t, raw
  /// pointer) with comm.all_gather_host, and maps every peer's region: cudaIpcOpenMemHandle for peers in
  /// other processes, cudaDeviceEnablePeerAccess + the raw pointer for peers in this process (ranks as
  /// threads, as in tools/bench_generate). Uses comm.stream() and synchronizes it.
  /// Throws Error (the same decision on every rank, so no rank is left waiting) when it cannot work:
  /// disabled by TPSHARD_NO_CUSTOM_ALL_REDUCE, tp_size not in 2..8, max_bytes 0, ranks on different hosts,
  /// no peer access between the devices, an allocation or IPC call failed on some rank.
  CustomAllReduce(NcclCommunicator& comm, size_t max_bytes);
  /// Closes the IPC mappings and frees the region (no collective, no sync: see the class comment).
  ~CustomAllReduce();
  CustomAllReduce(const CustomAllReduce&) = delete;
  CustomAllReduce& operator=(const CustomAllReduce&) = delete;

  /// Same as the constructor, but returns nullptr and sets *why_not (when non-null) instead of throwing for
  /// the reasons listed there; all ranks return nullptr together. TPSHARD_NO_CUSTOM_ALL_REDUCE=1 gives
  /// why_not "disabled by TPSHARD_NO_CUSTOM_ALL_REDUCE" (for A/B benchmarks). Errors of the communicator
  /// itself (a peer died during the exchange) still throw.
  static std::unique_ptr<CustomAllReduce> try_create(NcclCommunicator& comm, size_t max_bytes,
                                                     std::string* why_not);

  /// True when all_reduce_sum accepts (buf, count, dtype): count x dtype_size(dtype) <= max_bytes, buf
  /// 16-byte aligned and count x dtype_size a multiple of 16 bytes (so 8 f16/bf16 or 4 f32 elements).
  /// Pure host check (no CUDA call).
  bool eligible(const void* buf, size_t count, DType dtype) const;

  /// In-place sum over ranks of count elements of dtype (F32, F16, BF16) at device pointer buf (any device
  /// memory of the current device, no registration) on `stream`. Sums in fp32 in rank order 0..tp_size-1
  /// and rounds once, so all ranks get bitwise identical results; for 2 ranks they equal NCCL's
  /// (correctly rounded a + b). Enqueues exactly one kernel (none when count == 0), no host sync;
  /// capturable in CUDA graphs and replayable any number of times (its state lives in device memory).
  /// Throws Error when !eligible(buf, count, dtype) or the current device is not the one of creation.
  void all_reduce_sum(void* buf, size_t count, DType dtype, cudaStream_t stream);

  int tp_rank() const { return rank_; }
  int tp_size() const { return size_; }
  size_t max_bytes() const { return max_bytes_; }

 private:
  CustomAllReduce() = default;  ///< empty; try_create then calls init
  /// Collective setup shared by the constructor and try_create; false + *why_not when it cannot work
  /// (then nothing is left allocated, and every rank returned false).
  bool init(NcclCommunicator& comm, size_t max_bytes, std::string* why_not);
  void release();

  int rank_ = 0;
  int size_ = 0;
  int device_ = -1;
  size_t max_bytes_ = 0;               ///< as requested (eligible() bound)
  size_t data_bytes_ = 0;              ///< max_bytes rounded up to 16: size of each of the two data buffers
  uint64_t timeout_ns_ = 0;            ///< spin timeout of the kernel, 0 = none
  void* region_ = nullptr;             ///< this rank's region (cudaMalloc), layout in custom_all_reduce.cu
  void* peer_region_[kMaxRanks] = {};  ///< every rank's region as seen from this device (own included)
  bool ipc_opened_[kMaxRanks] = {};    ///< peer_region_[r] came from cudaIpcOpenMemHandle (close it)
};

}  // namespace tpshard::cuda
