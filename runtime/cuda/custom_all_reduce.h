// custom_all_reduce.h: one-shot all_reduce over NVLink for the small messages of decode.
// Owns: the per-rank IPC-shared staging region (double-buffered data + flags + call counters), mapping the
// peers' regions (CUDA IPC across processes, peer access within one process), and the one-kernel
// in-place sum. Does not own: choosing between it and NCCL (the transformer's all_reduce does that),
// the host exchange used at creation (host_exchange.h), the other kernels on the same regions
// (peer_kernels.h, used by PeerCommunicator through regions()).
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "format/dtype.h"
#include "kernels/norm.cuh"
#include "runtime/cuda/device_comm.h"
#include "runtime/host_exchange.h"

namespace tpshard::cuda {

struct PeerRegions;

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
/// What CustomAllReduce::init reads: from the environment by default (runtime/tuning.h:
/// TPSHARD_NO_CUSTOM_ALL_REDUCE, TPSHARD_CUSTOM_ALL_REDUCE_TIMEOUT_S); tests and tools may change it
/// before creating a CustomAllReduce.
struct CustomAllReduceSettings {
  bool enabled = true;       ///< false: every rank refuses (why_not "disabled by TPSHARD_NO_CUSTOM_ALL_REDUCE")
  double timeout_s = 300.0;  ///< spin limit of the kernels; 0 = none
};
/// The process-wide settings, initialized from tuning() on the first call.
CustomAllReduceSettings& custom_all_reduce_settings();

class CustomAllReduce {
 public:
  static constexpr int kMaxRanks = 8;   ///< largest tp_size supported
  static constexpr int kBlocks = 32;    ///< blocks of every launch (fixed: see the protocol)
  static constexpr int kThreads = 512;  ///< threads per block

  /// Collective over the ranks of `exchange` (every rank constructs it, same max_bytes). Allocates on the
  /// current device one IPC-shareable region of 2 x max_bytes (rounded up to 16) of data + flags + call
  /// counters + 3 MiB of lamport receive buffers, initializes it on `stream` and synchronizes it, exchanges
  /// (hostname, pid, device ordinal, PCI bus id, cudaIpcMemHandle_t, raw pointer) with exchange.all_gather,
  /// and maps every peer's region: cudaIpcOpenMemHandle for peers in other processes,
  /// cudaDeviceEnablePeerAccess + the raw pointer for peers in this process (ranks as threads, as in
  /// tools/bench_generate). Throws Error (the same decision on every rank, so no rank is left waiting) when
  /// it cannot work: disabled (CustomAllReduceSettings::enabled false), tp_size not in 2..8, max_bytes 0, ranks on
  /// different hosts, no peer access between the devices, an allocation or IPC call failed on some rank.
  CustomAllReduce(HostExchange& exchange, cudaStream_t stream, size_t max_bytes);
  /// The same with the exchange done through comm.all_gather_host and comm.stream() (the NCCL path).
  CustomAllReduce(DeviceCommunicator& comm, size_t max_bytes);
  /// Closes the IPC mappings and frees the region (no collective, no sync: see the class comment).
  ~CustomAllReduce();
  CustomAllReduce(const CustomAllReduce&) = delete;
  CustomAllReduce& operator=(const CustomAllReduce&) = delete;

  /// Same as the constructor, but returns nullptr and sets *why_not (when non-null) instead of throwing for
  /// the reasons listed there; all ranks return nullptr together. Disabled gives
  /// why_not "disabled by TPSHARD_NO_CUSTOM_ALL_REDUCE" (for A/B benchmarks). Errors of the communicator
  /// itself (a peer died during the exchange) still throw.
  static std::unique_ptr<CustomAllReduce> try_create(HostExchange& exchange, cudaStream_t stream, size_t max_bytes,
                                                     std::string* why_not);
  static std::unique_ptr<CustomAllReduce> try_create(DeviceCommunicator& comm, size_t max_bytes,
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

  /// True when all_reduce_add_norm accepts p: dtype F32/F16/BF16, hidden a multiple of 4 with rows of a
  /// multiple of 16 bytes and at most 4 x kThreads x 16 bytes, n x row bytes <= max_bytes, add0 / residual
  /// / out0 / out1 16-byte aligned, weight0 and out0 given, no add0_weight and weight_offset 0 (Gemma 2's
  /// norms take the unfused pair). Pure host check.
  bool add_norm_eligible(const AddNormParams& p) const;
  /// all_reduce_sum of p.add0 ([n, hidden] of p.dtype: this rank's row-parallel partial sums), then
  /// add_norm(p) (kernels/norm.cuh) with those summed rows as add0, in ONE kernel (all_reduce_norm.cu).
  /// The sum is in fp32 in rank order, rounded once to dtype, as all_reduce_sum; p.add0 is left as it
  /// was (not summed). Same collective rules as all_reduce_sum (every rank makes the same calls, in the
  /// same order as its all_reduce_sum calls); one kernel, capturable. Throws Error when
  /// !add_norm_eligible(p). Calls of 16-bit dtypes whose message (n x hidden) is at most 128 KiB (8 decode
  /// rows of 8,192) take the "lamport" path: each rank pushes its rows into the peers' receive buffers and
  /// waits on its own memory until no element is -0.0 (all_reduce_norm.cu). Same bits as the flag path,
  /// except that a partial sum of -0.0 is sent as +0.0 (which can change only the sign of an exact-zero sum).
  void all_reduce_add_norm(const AddNormParams& p, cudaStream_t stream);
  /// True when all_reduce_add_norm(p) takes the lamport path (eligible, lamport on, 16-bit, <= 128 KiB).
  bool lamport_eligible(const AddNormParams& p) const;
  /// Switch the lamport path of all_reduce_add_norm on or off on this rank (default: on; tests compare
  /// it with the flag path). Every rank must make the same choice before the same call.
  void set_lamport(bool on) { lamport_ = on; }

  int tp_rank() const { return rank_; }
  int tp_size() const { return size_; }
  size_t max_bytes() const { return max_bytes_; }
  /// The mapped regions and protocol parameters, for the other kernels of the protocol (peer_kernels.h).
  PeerRegions regions() const;

 private:
  CustomAllReduce() = default;  ///< empty; try_create then calls init
  /// Collective setup shared by the constructor and try_create; false + *why_not when it cannot work
  /// (then nothing is left allocated, and every rank returned false).
  bool init(HostExchange& exchange, cudaStream_t stream, size_t max_bytes, std::string* why_not);
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
  bool lamport_ = true;                ///< all_reduce_add_norm may take the lamport path
};

/// Every rank's region as mapped on this device, and the protocol parameters (passed by value into the
/// kernels of peer_kernels.h, so graph replays see the same pointers).
struct PeerRegions {
  uint8_t* regions[CustomAllReduce::kMaxRanks] = {};  ///< [r]: rank r's region (own at [rank]); null past size
  uint64_t data_bytes = 0;  ///< D: bytes of each of the two staging buffers (multiple of 16)
  uint64_t timeout_ns = 0;  ///< spin limit of the kernels, 0 = none
  int rank = 0;             ///< tp_rank of this device
  int size = 0;             ///< tp_size
  int device = -1;          ///< CUDA device of this rank
};

}  // namespace tpshard::cuda
