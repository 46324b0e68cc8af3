// custom_all_reduce_protocol.cuh: the device side of CustomAllReduce's flag protocol (region layout,
// epoch counter, release/acquire signalling, spin with timeout) and its summation, shared by every kernel
// that takes part in it: the one-shot all_reduce (custom_all_reduce.cu), the fused all_reduce + add_norm
// (all_reduce_norm.cu) and the peer communicator's kernels (peer_kernels.cu). The protocol and why it is
// safe are described in custom_all_reduce.cu; a kernel that follows it must run kBlocks blocks, and every
// block must call begin_call() then handshake() exactly once per call, whatever share of the message it
// owns.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>

#include "kernels/common.cuh"
#include "runtime/cuda/custom_all_reduce.h"

namespace tpshard::cuda::car_protocol {

constexpr int kMaxRanks = CustomAllReduce::kMaxRanks;
constexpr int kBlocks = CustomAllReduce::kBlocks;
constexpr int kThreads = CustomAllReduce::kThreads;
/// Region of one rank, D = data bytes: data[0] [0, D) | data[1] [D, 2D) | flags[kBlocks][kMaxRanks] u32 |
/// counters[kBlocks] u32.
constexpr size_t kFlagsBytes = size_t(kBlocks) * kMaxRanks * sizeof(uint32_t);
constexpr size_t kCountersBytes = size_t(kBlocks) * sizeof(uint32_t);

/// After the counters: the receive buffers of the fused all_reduce + add_norm's "lamport" path
/// (all_reduce_norm.cu): lamport_counters[kBlocks] u32, then data[kLamportSlots][kMaxRanks][kLamportBytes]:
/// data[s][r] holds what rank r pushed into this rank's region on a call of slot s. Every 16-bit element
/// is -0.0 (0x8000) while empty: set at creation, and again by this rank right after it read a row.
constexpr size_t kLamportBytes = size_t(128)
                                 << 10;  ///< largest message of the lamport path: 8 rows of 8,192 bf16
constexpr int kLamportSlots = 3;
constexpr size_t kLamportCountersBytes = size_t(kBlocks) * sizeof(uint32_t);
constexpr size_t kLamportDataBytes = size_t(kLamportSlots) * kMaxRanks * kLamportBytes;
constexpr uint16_t kLamportEmpty = 0x8000;  ///< -0.0 in f16 and bf16

/// Every rank's region as mapped on this device, passed by value (graph replays see the same pointers).
struct Regions {
  uint8_t* of[kMaxRanks];
  uint64_t data_bytes;  ///< D
  uint64_t timeout_ns;  ///< spin limit, 0 = none
  int rank;
};

__device__ __forceinline__ void st_release_sys(uint32_t* p, uint32_t v) {
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

__device__ __forceinline__ uint32_t ld_acquire_sys(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ uint64_t global_timer_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

/// r's region without indexing the parameter array dynamically (which would copy it to local memory).
__device__ __forceinline__ uint8_t* region_of(const Regions& g, int r) {
  uint8_t* out = g.of[0];
#pragma unroll
  for (int i = 1; i < kMaxRanks; ++i) out = r == i ? g.of[i] : out;
  return out;
}

/// The timeout of a spin loop that waits for a peer: call tick() once per poll. After timeout_ns (when
/// non-zero) it prints which rank waited for which and traps, so that a dead peer gives an error (the
/// stream reports cudaErrorLaunchFailure) instead of a hang. The clock is read every 1024 polls.
struct SpinTimeout {
  uint64_t timeout_ns;
  int rank, peer;
  uint32_t polls = 0;
  uint64_t start = 0;
  __device__ __forceinline__ SpinTimeout(uint64_t timeout, int self, int waited_for)
      : timeout_ns(timeout), rank(self), peer(waited_for) {}
  __device__ __forceinline__ void tick() {
    if (timeout_ns == 0 || (++polls & 0x3ffu) != 0) return;
    const uint64_t now = global_timer_ns();
    if (start == 0) {
      start = now;
    } else if (now - start > timeout_ns) {
      printf("custom all_reduce: rank %d block %d waited %.1f s for rank %d; trapping\n", rank,
             int(blockIdx.x), double(now - start) * 1e-9, peer);
      __trap();
    }
  }
};

/// Spin until *flag >= epoch (mod 2^32), with SpinTimeout.
__device__ __forceinline__ void wait_flag(const uint32_t* flag, uint32_t epoch, uint64_t timeout_ns, int rank,
                                          int peer) {
  SpinTimeout timeout(timeout_ns, rank, peer);
  while (static_cast<int32_t>(ld_acquire_sys(flag) - epoch) < 0) timeout.tick();
}

/// Step 1 of a call, by the whole block: this block's epoch (its call counter + 1, stored back). Contains
/// __syncthreads.
__device__ __forceinline__ uint32_t begin_call(const Regions& g) {
  __shared__ uint32_t s_epoch;
  if (threadIdx.x == 0) {
    uint8_t* const self = region_of(g, g.rank);
    uint32_t* const counter = reinterpret_cast<uint32_t*>(self + 2 * g.data_bytes + kFlagsBytes) + blockIdx.x;
    const uint32_t e = *counter + 1u;
    *counter = e;
    s_epoch = e;
  }
  __syncthreads();
  return s_epoch;
}

/// Staging buffer data[epoch & 1] of rank r.
__device__ __forceinline__ uint8_t* staging(const Regions& g, int r, uint32_t epoch) {
  return region_of(g, r) + (epoch & 1u) * g.data_bytes;
}

/// Step 3, by the whole block, after it staged its share: signal every peer and wait for theirs (block
/// blockIdx.x of every rank pairs with block blockIdx.x of every other). Contains __syncthreads before
/// (the staged data is ordered before the release) and after (peers' data visible to every thread).
template <int kRanks>
__device__ __forceinline__ void handshake(const Regions& g, uint32_t epoch) {
  __syncthreads();
  const int peer = threadIdx.x;
  if (peer < kRanks && peer != g.rank) {
    const int b = blockIdx.x;
    uint32_t* const peer_flag = reinterpret_cast<uint32_t*>(region_of(g, peer) + 2 * g.data_bytes) + b * kMaxRanks + g.rank;
    st_release_sys(peer_flag, epoch);
    const uint32_t* const own = reinterpret_cast<const uint32_t*>(region_of(g, g.rank) + 2 * g.data_bytes);
    wait_flag(own + b * kMaxRanks + peer, epoch, g.timeout_ns, g.rank, peer);
  }
  __syncthreads();
}

/// This rank's lamport call counters (one per block; read and written only by that block of this rank).
__device__ __forceinline__ uint32_t* lamport_counters(const Regions& g) {
  return reinterpret_cast<uint32_t*>(region_of(g, g.rank) + 2 * g.data_bytes + kFlagsBytes + kCountersBytes);
}

/// Receive buffer data[slot][src] of rank dst's region (dst == own rank: where src's rows arrive).
__device__ __forceinline__ uint4* lamport_buffer(const Regions& g, int dst, int slot, int src) {
  return reinterpret_cast<uint4*>(region_of(g, dst) + 2 * g.data_bytes + kFlagsBytes + kCountersBytes +
                                  kLamportCountersBytes + (size_t(slot) * kMaxRanks + src) * kLamportBytes);
}

/// Sum of one 16-byte pack of T over kRanks ranks, in rank order, in fp32; rounded once to T: the
/// arithmetic every all_reduce kernel on these regions uses, so that they all give the same bits.
template <typename T, int kRanks>
__device__ __forceinline__ uint4 sum_packs(const uint4 (&v)[kRanks]) {
  constexpr int kElems = 16 / sizeof(T);
  float acc[kElems];
  const T* e0 = reinterpret_cast<const T*>(&v[0]);
#pragma unroll
  for (int j = 0; j < kElems; ++j) acc[j] = to_f32(e0[j]);
#pragma unroll
  for (int r = 1; r < kRanks; ++r) {
    const T* er = reinterpret_cast<const T*>(&v[r]);
#pragma unroll
    for (int j = 0; j < kElems; ++j) acc[j] += to_f32(er[j]);
  }
  uint4 out;
  T* eo = reinterpret_cast<T*>(&out);
#pragma unroll
  for (int j = 0; j < kElems; ++j) eo[j] = from_f32<T>(acc[j]);
  return out;
}

}  // namespace tpshard::cuda::car_protocol
