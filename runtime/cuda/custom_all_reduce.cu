// custom_all_reduce.cu: CustomAllReduce (see custom_all_reduce.h): creation (allocate, exchange and map
// the per-rank regions; the same verdict on every rank) and the one-shot all_reduce kernel.
// Technique: the one-shot all-reduce of vLLM (csrc/custom_all_reduce.cuh) and TensorRT-LLM
// (customAllReduceKernels.cu), read to learn; the protocol below (copy-in + double buffer instead of an
// end barrier) is our own.
#include "runtime/cuda/custom_all_reduce.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/common.cuh"
#include "kernels/pdl.cuh"
#include "runtime/cuda/check.h"
#include "runtime/tuning.h"
#include "runtime/cuda/custom_all_reduce_protocol.cuh"

namespace tpshard::cuda {
namespace {

// ---------------------------------------------------------------------------------------------------
// Region of one rank (one cudaMalloc, shared through CUDA IPC / peer access), D = data_bytes (max_bytes
// rounded up to 16):
//   [0, D)        data[0]: staging copy of this rank's message on calls with an even epoch
//   [D, 2D)       data[1]: the same for odd epochs
//   [2D, 2D+F)    flags[kBlocks][kMaxRanks] (uint32): flags[b][r] = last epoch rank r signalled for
//                 block b; written ONLY by rank r (remotely), read only by this rank
//   [2D+F, +C)    counters[kBlocks] (uint32): epoch = number of calls block b of this rank has started;
//                 read and written only by block b of this rank's kernels
//   then          the lamport path's counters and receive buffers (custom_all_reduce_protocol.cuh,
//                 all_reduce_norm.cu), which no other kernel touches
// All zero at creation, except the lamport receive buffers: every 16-bit element -0.0 (empty).
//
// Protocol of call (epoch) e, the same kernel on every rank, kBlocks blocks; block b owns packs
// [b*per, (b+1)*per) of the message (per = ceil(packs / kBlocks), one pack = 16 bytes; the same chunking
// on every rank because every rank passes the same count and dtype):
//   0. griddep_wait(): everything earlier on the stream (incl. this rank's previous call) is complete.
//   1. thread 0: e = ++counters[b]; parity p = e & 1.
//   2. the block copies its chunk of buf into data[p] of its own region.
//   3. __syncthreads; thread r (r != rank, r < tp_size) writes e into flags[b][rank] of rank r's region
//      with st.release.sys (covers the whole block's copy: the barrier orders it before the release),
//      then spins with ld.acquire.sys on flags[b][r] of its own region until it is >= e (wrap-safe
//      signed difference).
//   4. __syncthreads; every thread sums its packs of data[p] of ranks 0..tp_size-1 in fp32, in rank
//      order, rounds once, and writes them into buf.
//
// Why data[p] may be overwritten two calls later (by this rank, call e+2, any block, any chunking):
// the readers of data[p] of rank i are the peers' call e. Rank i starts call e+2 only after its call
// e+1 is complete (step 0), and every block of call e+1 passed step 3, i.e. saw each peer r's signal e+1.
// Peer r sends signal e+1 in its call e+1 after step 0, so after r's call e is complete, reads included.
// Hence every read of data_i[p] by call e is finished before call e+2 of rank i writes data_i[p]. The
// chunking may differ between calls (different counts): the argument uses whole-kernel completion, not
// the chunk of one block. It needs every call to synchronise every block with every peer, which is why
// the grid is always kBlocks blocks, even for one pack; that also keeps counters[b] equal for all b
// (so the parity is the same in every block of a call).
// Why a flag can be trusted: rank r writes flags_i[b][r] only with increasing epochs, and can be at most
// one epoch ahead of rank i's wait (r's signal e+1 needs r past its wait of call e, which needs i's
// signal e, sent in i's call e): hence ">= e", never "== e".
// Other kernels on the same region (peer_kernels.cu: chunked all_reduce, all_gather, broadcast, barrier)
// follow the same protocol: kBlocks blocks, steps 0-4 with their own chunking of a dense staging layout
// (byte i of the message at byte i of data[p]), every block signalling every peer on every call. The
// argument above uses only that, so calls of any of them interleave freely on one stream.
// ---------------------------------------------------------------------------------------------------

using car_protocol::kBlocks;
using car_protocol::kCountersBytes;
using car_protocol::kFlagsBytes;
using car_protocol::kMaxRanks;
using car_protocol::kThreads;
using car_protocol::Regions;

/// Kernel parameters (passed by value, so graph replays see the same region pointers).
struct OneShotParams {
  Regions g;       ///< every rank's region as mapped on this device, D, spin limit, rank
  uint4* buf;      ///< [packs] the message, in place (16-byte packs of dtype elements)
  uint64_t packs;  ///< message size in 16-byte packs
};

/// The one-shot all_reduce (protocol above). Grid: kBlocks x kThreads.
template <typename T, int kRanks>
__global__ void __launch_bounds__(kThreads) one_shot_all_reduce_kernel(OneShotParams p) {
  griddep_wait();
  griddep_launch_dependents();  // all our blocks are resident by now: a dependent cannot starve them
  const int b = blockIdx.x;
  const uint32_t epoch = car_protocol::begin_call(p.g);  // steps 0-1
  const uint64_t per_block = (p.packs + kBlocks - 1) / kBlocks;
  const uint64_t begin = min(p.packs, uint64_t(b) * per_block);
  const uint64_t end = min(p.packs, begin + per_block);
  uint4* const stage_self = reinterpret_cast<uint4*>(car_protocol::staging(p.g, p.g.rank, epoch));
  for (uint64_t i = begin + threadIdx.x; i < end; i += kThreads) stage_self[i] = p.buf[i];  // step 2
  car_protocol::handshake<kRanks>(p.g, epoch);                                             // step 3
  for (uint64_t i = begin + threadIdx.x; i < end; i += kThreads) {                         // step 4
    uint4 v[kRanks];
#pragma unroll
    for (int r = 0; r < kRanks; ++r)
      v[r] = __ldcg(reinterpret_cast<const uint4*>(car_protocol::staging(p.g, r, epoch)) + i);
    p.buf[i] = car_protocol::sum_packs<T, kRanks>(v);
  }
}

template <typename T>
cudaError_t launch_one_shot(int tp_size, const OneShotParams& p, cudaStream_t stream) {
  const dim3 grid(kBlocks), block(kThreads);
  switch (tp_size) {
    case 2:
      return launch_pdl(one_shot_all_reduce_kernel<T, 2>, grid, block, 0, stream, p);
    case 3:
      return launch_pdl(one_shot_all_reduce_kernel<T, 3>, grid, block, 0, stream, p);
    case 4:
      return launch_pdl(one_shot_all_reduce_kernel<T, 4>, grid, block, 0, stream, p);
    case 5:
      return launch_pdl(one_shot_all_reduce_kernel<T, 5>, grid, block, 0, stream, p);
    case 6:
      return launch_pdl(one_shot_all_reduce_kernel<T, 6>, grid, block, 0, stream, p);
    case 7:
      return launch_pdl(one_shot_all_reduce_kernel<T, 7>, grid, block, 0, stream, p);
    case 8:
      return launch_pdl(one_shot_all_reduce_kernel<T, 8>, grid, block, 0, stream, p);
  }
  return cudaErrorInvalidValue;
}

// ---------------------------------------------------------------------------------------------------
// Creation.

/// What each rank publishes in the first exchange (plain bytes: all_gather_host copies it).
struct PeerInfo {
  char host[64];
  char pci_bus_id[32];
  int32_t pid;
  int32_t device;
  int32_t ok;  ///< 1 when this rank allocated and exported its region
  int32_t pad;
  uint64_t process_id;  ///< random per process: same value = same process (pids repeat across containers)
  uint64_t max_bytes;   ///< must be equal on every rank (the flag offsets depend on it)
  uint64_t ptr;         ///< the region's device pointer in its own process
  cudaIpcMemHandle_t handle;
  char why[200];  ///< when !ok
};

/// Second exchange: could this rank map every peer?
struct Verdict {
  int32_t ok;
  char why[200];
};

void copy_why(char (&dst)[200], const std::string& s) {
  std::memset(dst, 0, sizeof(dst));
  std::strncpy(dst, s.c_str(), sizeof(dst) - 1);
}

/// One reason for all ranks: the common reason when every failing rank gives the same one, else
/// "rank r: ...; rank s: ...".
std::string combine_reasons(const std::vector<std::pair<int, std::string>>& fails) {
  bool same = true;
  for (const auto& f : fails) same = same && f.second == fails[0].second;
  if (same) return fails[0].second;
  std::string out;
  for (const auto& f : fails)
    out += (out.empty() ? "" : "; ") + std::string("rank ") + std::to_string(f.first) + ": " + f.second;
  return out;
}

std::string cuda_why(const char* what, cudaError_t e) {
  (void)cudaGetLastError();  // clear it: this failure is reported as a verdict, not a sticky error
  return std::string(what) + " failed: " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")";
}

/// A random number drawn once per process (plus the pid), to tell "same process" apart reliably.
uint64_t process_id() {
  static const uint64_t id = [] {
    std::random_device rd;
    return (uint64_t(rd()) << 32) ^ uint64_t(rd()) ^ uint64_t(getpid());
  }();
  return id;
}

__global__ void fill_empty_kernel(uint32_t* p, size_t words) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < words;
       i += size_t(gridDim.x) * blockDim.x)
    p[i] = 0x80008000u;  // two empty (-0.0) 16-bit elements
}

/// Mark bytes (a multiple of 4) at p as empty lamport elements, on stream.
cudaError_t fill_empty(uint8_t* p, size_t bytes, cudaStream_t stream) {
  fill_empty_kernel<<<256, 256, 0, stream>>>(reinterpret_cast<uint32_t*>(p), bytes / 4);
  return cudaGetLastError();
}

}  // namespace

CustomAllReduceSettings& custom_all_reduce_settings() {
  static CustomAllReduceSettings s{tuning().custom_all_reduce, tuning().custom_all_reduce_timeout_s};
  return s;
}

CustomAllReduce::CustomAllReduce(HostExchange& exchange, cudaStream_t stream, size_t max_bytes) {
  std::string why;
  if (!init(exchange, stream, max_bytes, &why))
    throw Error("custom all_reduce (tp_rank " + std::to_string(exchange.rank()) + "): " + why,
                "use CustomAllReduce::try_create to fall back to NCCL");
}

CustomAllReduce::CustomAllReduce(DeviceCommunicator& comm, size_t max_bytes) {
  CommHostExchange exchange(comm);
  std::string why;
  if (!init(exchange, comm.stream(), max_bytes, &why))
    throw Error("custom all_reduce (tp_rank " + std::to_string(comm.rank()) + "): " + why,
                "use CustomAllReduce::try_create to fall back to NCCL");
}

std::unique_ptr<CustomAllReduce> CustomAllReduce::try_create(HostExchange& exchange, cudaStream_t stream,
                                                             size_t max_bytes, std::string* why_not) {
  std::unique_ptr<CustomAllReduce> car(new CustomAllReduce());
  std::string why;
  if (!car->init(exchange, stream, max_bytes, &why)) {
    if (why_not) *why_not = why;
    return nullptr;
  }
  return car;
}

std::unique_ptr<CustomAllReduce> CustomAllReduce::try_create(DeviceCommunicator& comm, size_t max_bytes,
                                                             std::string* why_not) {
  CommHostExchange exchange(comm);
  return try_create(exchange, comm.stream(), max_bytes, why_not);
}

PeerRegions CustomAllReduce::regions() const {
  PeerRegions v;
  for (int r = 0; r < kMaxRanks; ++r) v.regions[r] = static_cast<uint8_t*>(peer_region_[r]);
  v.data_bytes = data_bytes_;
  v.timeout_ns = timeout_ns_;
  v.rank = rank_;
  v.size = size_;
  v.device = device_;
  return v;
}

CustomAllReduce::~CustomAllReduce() { release(); }

void CustomAllReduce::release() {
  int prev = -1;
  const bool switch_device = region_ != nullptr && cudaGetDevice(&prev) == cudaSuccess && prev != device_;
  if (switch_device) (void)cudaSetDevice(device_);
  for (int r = 0; r < kMaxRanks; ++r) {
    if (ipc_opened_[r] && peer_region_[r]) (void)cudaIpcCloseMemHandle(peer_region_[r]);
    ipc_opened_[r] = false;
    peer_region_[r] = nullptr;
  }
  if (region_) (void)cudaFree(region_);
  region_ = nullptr;
  if (switch_device) (void)cudaSetDevice(prev);
}

bool CustomAllReduce::init(HostExchange& exchange, cudaStream_t stream, size_t max_bytes, std::string* why_not) {
  rank_ = exchange.rank();
  size_ = exchange.size();
  max_bytes_ = max_bytes;
  const CustomAllReduceSettings settings = custom_all_reduce_settings();
  timeout_ns_ = settings.timeout_s <= 0.0 ? 0 : uint64_t(settings.timeout_s * 1e9);
  auto fail = [&](const std::string& why) {
    release();
    if (why_not) *why_not = why;
    return false;
  };
  // Decisions every rank takes identically without talking.
  if (size_ < 2 || size_ > kMaxRanks)
    return fail("tp_size " + std::to_string(size_) + ": the custom all_reduce needs 2.." +
                std::to_string(kMaxRanks) + " ranks");
  if (max_bytes == 0 || max_bytes > (size_t(1) << 40))
    return fail("max_bytes " + std::to_string(max_bytes) + " out of range");
  data_bytes_ = (max_bytes + 15) / 16 * 16;

  try {
    // 1. Allocate, zero and export this rank's region; publish it with the local verdict.
    PeerInfo mine;
    std::memset(&mine, 0, sizeof(mine));
    gethostname(mine.host, sizeof(mine.host) - 1);
    mine.pid = int32_t(getpid());
    mine.process_id = process_id();
    mine.max_bytes = max_bytes;
    std::string local_why;
    if (!settings.enabled) local_why = "disabled by TPSHARD_NO_CUSTOM_ALL_REDUCE";
    cudaError_t e = cudaSuccess;
    if (local_why.empty() && (e = cudaGetDevice(&device_)) != cudaSuccess)
      local_why = cuda_why("cudaGetDevice", e);
    mine.device = device_;
    if (local_why.empty() &&
        (e = cudaDeviceGetPCIBusId(mine.pci_bus_id, sizeof(mine.pci_bus_id) - 1, device_)) != cudaSuccess)
      local_why = cuda_why("cudaDeviceGetPCIBusId", e);
    const size_t lamport_at =
        2 * data_bytes_ + kFlagsBytes + kCountersBytes + car_protocol::kLamportCountersBytes;
    const size_t region_bytes = lamport_at + car_protocol::kLamportDataBytes;
    if (local_why.empty() && (e = cudaMalloc(&region_, region_bytes)) != cudaSuccess) {
      region_ = nullptr;
      local_why = cuda_why(("cudaMalloc of " + std::to_string(region_bytes) + " bytes").c_str(), e);
    }
    if (local_why.empty() && (e = cudaMemsetAsync(region_, 0, region_bytes, stream)) != cudaSuccess)
      local_why = cuda_why("cudaMemsetAsync", e);
    if (local_why.empty() && (e = fill_empty(static_cast<uint8_t*>(region_) + lamport_at,
                                             car_protocol::kLamportDataBytes, stream)) != cudaSuccess)
      local_why = cuda_why("filling the lamport receive buffers", e);
    // The zeroing must be complete before any peer can signal into this region (after the exchanges).
    if (local_why.empty() && (e = cudaStreamSynchronize(stream)) != cudaSuccess)
      local_why = cuda_why("cudaStreamSynchronize after zeroing the region", e);
    if (local_why.empty() && (e = cudaIpcGetMemHandle(&mine.handle, region_)) != cudaSuccess)
      local_why = cuda_why("cudaIpcGetMemHandle", e);
    mine.ptr = uint64_t(reinterpret_cast<uintptr_t>(region_));
    mine.ok = local_why.empty() ? 1 : 0;
    copy_why(mine.why, local_why);
    const std::vector<std::string> gathered =
        exchange.all_gather(std::string(reinterpret_cast<const char*>(&mine), sizeof(mine)));
    std::vector<PeerInfo> info(size_);
    for (int r = 0; r < size_; ++r) {
      TPS_CHECK(gathered[size_t(r)].size() == sizeof(PeerInfo),
                "custom all_reduce: rank " + std::to_string(r) + " sent " + std::to_string(gathered[size_t(r)].size()) +
                    " bytes of peer info, expected " + std::to_string(sizeof(PeerInfo)),
                "every rank must run the same tpshard build");
      std::memcpy(&info[r], gathered[size_t(r)].data(), sizeof(PeerInfo));
    }

    std::vector<std::pair<int, std::string>> fails;
    for (int r = 0; r < size_; ++r)
      if (!info[r].ok)
        fails.emplace_back(r, std::string(info[r].why, strnlen(info[r].why, sizeof(info[r].why))));
    if (!fails.empty()) return fail(combine_reasons(fails));
    for (int r = 1; r < size_; ++r)
      if (info[r].max_bytes != info[0].max_bytes)
        return fail("max_bytes differs between ranks (rank 0: " + std::to_string(info[0].max_bytes) +
                    ", rank " + std::to_string(r) + ": " + std::to_string(info[r].max_bytes) + ")");
    for (int r = 1; r < size_; ++r)
      if (std::strncmp(info[r].host, info[0].host, sizeof(info[0].host)) != 0)
        return fail("ranks on different hosts (rank 0 on " + std::string(info[0].host) + ", rank " +
                    std::to_string(r) + " on " + info[r].host +
                    "): the custom all_reduce needs every tp rank on one host");

    // 2. Map every peer's region (locally), then agree on the outcome.
    local_why.clear();
    for (int r = 0; r < size_ && local_why.empty(); ++r) {
      if (r == rank_) {
        peer_region_[r] = region_;
        continue;
      }
      const PeerInfo& pi = info[r];
      const bool same_process = pi.process_id == mine.process_id && pi.pid == mine.pid;
      int peer_device = same_process ? pi.device : -1;
      if (!same_process && cudaDeviceGetByPCIBusId(&peer_device, pi.pci_bus_id) != cudaSuccess) {
        (void)cudaGetLastError();
        peer_device = -1;  // not visible here: cudaIpcOpenMemHandle decides
      }
      if (peer_device >= 0 && peer_device != device_) {
        int can = 0;
        if ((e = cudaDeviceCanAccessPeer(&can, device_, peer_device)) != cudaSuccess) {
          local_why = cuda_why("cudaDeviceCanAccessPeer", e);
          break;
        }
        if (!can) {
          local_why = "no peer access from device " + std::to_string(device_) + " (" + mine.pci_bus_id +
                      ") to device " + std::to_string(peer_device) + " (" + pi.pci_bus_id + ")";
          break;
        }
      }
      if (same_process) {
        if (peer_device != device_) {
          e = cudaDeviceEnablePeerAccess(peer_device, 0);
          if (e == cudaErrorPeerAccessAlreadyEnabled) {
            (void)cudaGetLastError();
          } else if (e != cudaSuccess) {
            local_why =
                cuda_why(("cudaDeviceEnablePeerAccess(" + std::to_string(peer_device) + ")").c_str(), e);
            break;
          }
        }
        peer_region_[r] = reinterpret_cast<void*>(uintptr_t(pi.ptr));
      } else {
        void* mapped = nullptr;
        if ((e = cudaIpcOpenMemHandle(&mapped, pi.handle, cudaIpcMemLazyEnablePeerAccess)) != cudaSuccess) {
          local_why =
              cuda_why(("cudaIpcOpenMemHandle of rank " + std::to_string(r) + "'s region").c_str(), e);
          break;
        }
        peer_region_[r] = mapped;
        ipc_opened_[r] = true;
      }
    }
    Verdict v;
    std::memset(&v, 0, sizeof(v));
    v.ok = local_why.empty() ? 1 : 0;
    copy_why(v.why, local_why);
    // This exchange is also the barrier the zeroing needs: it completes on a rank only once every rank
    // entered it, i.e. after every rank's memset completed (each rank synchronized its stream in step 1).
    const std::vector<std::string> verdicts =
        exchange.all_gather(std::string(reinterpret_cast<const char*>(&v), sizeof(v)));
    fails.clear();
    for (int r = 0; r < size_; ++r) {
      Verdict vr;
      TPS_CHECK(verdicts[size_t(r)].size() == sizeof(Verdict),
                "custom all_reduce: rank " + std::to_string(r) + " sent a malformed verdict",
                "every rank must run the same tpshard build");
      std::memcpy(&vr, verdicts[size_t(r)].data(), sizeof(Verdict));
      if (!vr.ok) fails.emplace_back(r, std::string(vr.why, strnlen(vr.why, sizeof(vr.why))));
    }
    if (!fails.empty()) return fail(combine_reasons(fails));
  } catch (...) {
    release();
    throw;
  }
  return true;
}

bool CustomAllReduce::eligible(const void* buf, size_t count, DType dtype) const {
  if (region_ == nullptr) return false;
  if (dtype != DType::F32 && dtype != DType::F16 && dtype != DType::BF16) return false;
  const size_t elem = dtype_size(dtype);
  if (count > max_bytes_ / elem) return false;
  const size_t bytes = count * elem;
  return bytes % 16 == 0 && (count == 0 || (buf != nullptr && reinterpret_cast<uintptr_t>(buf) % 16 == 0));
}

void CustomAllReduce::all_reduce_sum(void* buf, size_t count, DType dtype, cudaStream_t stream) {
  TPS_CHECK(eligible(buf, count, dtype),
            "custom all_reduce: " + std::to_string(count) + " elements of " + dtype_name(dtype) +
                " are not eligible (max_bytes " + std::to_string(max_bytes_) +
                "; buf must be 16-byte aligned and the message a multiple of 16 bytes)",
            "call eligible() first and use NCCL otherwise");
  if (count == 0) return;
  int dev = -1;
  TPS_CUDA_CHECK(cudaGetDevice(&dev));
  TPS_CHECK(dev == device_,
            "custom all_reduce: called on device " + std::to_string(dev) + ", created on device " +
                std::to_string(device_),
            "call cudaSetDevice for this rank's GPU first");
  OneShotParams p;
  std::memset(&p, 0, sizeof(p));
  p.buf = static_cast<uint4*>(buf);
  for (int r = 0; r < size_; ++r) p.g.of[r] = static_cast<uint8_t*>(peer_region_[r]);
  p.g.data_bytes = data_bytes_;
  p.g.timeout_ns = timeout_ns_;
  p.g.rank = rank_;
  p.packs = count * dtype_size(dtype) / 16;
  cudaError_t e = cudaSuccess;
  TPS_DISPATCH_DTYPE(dtype, T, e = launch_one_shot<T>(size_, p, stream));
  TPS_CUDA_CHECK(e);
}

}  // namespace tpshard::cuda
