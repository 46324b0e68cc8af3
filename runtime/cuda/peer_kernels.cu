// peer_kernels.cu: launch_peer_all_reduce and launch_peer_gather (see peer_kernels.h). Both follow the
// protocol of custom_all_reduce.cu (primitives: custom_all_reduce_protocol.cuh) step by step (griddep_wait, per-block epoch, copy-in to data[parity],
// signal/wait every peer, read the peers' data[parity]) with a dense staging layout: element / byte i of
// the message lives at element / byte i of data[parity] on every rank, whatever the alignment of the
// caller's buffer, so the ranks agree on where everything is even when their buffers are aligned
// differently. Block b owns the 16-byte packs [b * per, (b + 1) * per) of the message (per = ceil(packs /
// kBlocks)), the same on every rank because every rank passes the same count.
#include "runtime/cuda/peer_kernels.h"

#include <cstdint>
#include <cstring>

#include "kernels/common.cuh"
#include "kernels/pdl.cuh"
#include "runtime/cuda/custom_all_reduce_protocol.cuh"

namespace tpshard::cuda {
namespace {

using car_protocol::kBlocks;
using car_protocol::kMaxRanks;
using car_protocol::kThreads;
using car_protocol::Regions;
using car_protocol::sum_packs;

/// 16-byte loads in flight per thread and loop iteration when copying (copy_packs).
constexpr int kCopyUnroll = 4;

struct AllReduceParams {
  Regions g;       ///< every rank's region as mapped on this device, D, spin limit, rank
  void* buf;       ///< [count] elements of T, in place; aligned to sizeof(T)
  uint64_t count;  ///< elements, count * sizeof(T) <= D
};

struct GatherParams {
  Regions g;
  const uint8_t* send;   ///< [bytes] this rank's contribution (all_gather) / the root's data (broadcast)
  uint8_t* recv;         ///< all_gather: recv + q * recv_stride receives rank q's bytes; broadcast: recv
  uint64_t bytes;        ///< message bytes per rank, <= D
  uint64_t recv_stride;  ///< bytes between the ranks' parts of recv (all_gather)
  int root;              ///< < 0: all_gather; else broadcast from this rank
};

/// Unsigned integer of the size of T (for __ldcg of one element).
template <int kSize> struct UintOf;
template <> struct UintOf<2> { using type = unsigned short; };
template <> struct UintOf<4> { using type = unsigned int; };

/// One element at p, loaded through L2 only (peer regions are written by other GPUs).
template <typename T>
__device__ __forceinline__ T load_cg(const T* p) {
  using U = typename UintOf<sizeof(T)>::type;
  const U u = __ldcg(reinterpret_cast<const U*>(p));
  T t;
  memcpy(&t, &u, sizeof(T));
  return t;
}

/// dst[i] = src[i] for packs i in [begin, end), the block's threads striding, kCopyUnroll loads in flight.
__device__ __forceinline__ void copy_packs(uint4* dst, const uint4* src, uint64_t begin, uint64_t end) {
  for (uint64_t i0 = begin + threadIdx.x; i0 < end; i0 += uint64_t(kThreads) * kCopyUnroll) {
    uint4 t[kCopyUnroll];
#pragma unroll
    for (int u = 0; u < kCopyUnroll; ++u) {
      const uint64_t i = i0 + uint64_t(u) * kThreads;
      if (i < end) t[u] = __ldcg(src + i);
    }
#pragma unroll
    for (int u = 0; u < kCopyUnroll; ++u) {
      const uint64_t i = i0 + uint64_t(u) * kThreads;
      if (i < end) dst[i] = t[u];
    }
  }
}

/// dst[i] = src[i] for bytes i in [lo, hi) (lo a multiple of 16), by the whole block: 16-byte moves when
/// both pointers are 16-byte aligned, 4-byte moves when both are 4-byte aligned, else bytes.
__device__ __forceinline__ void copy_bytes(uint8_t* dst, const uint8_t* src, uint64_t lo, uint64_t hi) {
  const uintptr_t both = reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src);
  uint64_t done = lo;
  if ((both & 15) == 0) {
    const uint64_t n = (hi - lo) / 16;
    copy_packs(reinterpret_cast<uint4*>(dst + lo), reinterpret_cast<const uint4*>(src + lo), 0, n);
    done = lo + 16 * n;
  } else if ((both & 3) == 0) {
    const uint64_t n = (hi - lo) / 4;
    unsigned int* d = reinterpret_cast<unsigned int*>(dst + lo);
    const unsigned int* s = reinterpret_cast<const unsigned int*>(src + lo);
    for (uint64_t i = threadIdx.x; i < n; i += kThreads) d[i] = __ldcg(s + i);
    done = lo + 4 * n;
  }
  for (uint64_t i = done + threadIdx.x; i < hi; i += kThreads) dst[i] = __ldcg(src + i);
}

/// fp32 rank-order sum of element e of data[parity] of ranks 0..kRanks-1, rounded once (the scalar twin of
/// sum_packs: the same additions in the same order, so the same bits).
template <typename T, int kRanks>
__device__ __forceinline__ T sum_element(const Regions& g, uint64_t parity_offset, uint64_t e) {
  float acc = to_f32(load_cg(reinterpret_cast<const T*>(g.of[0] + parity_offset) + e));
#pragma unroll
  for (int r = 1; r < kRanks; ++r) acc += to_f32(load_cg(reinterpret_cast<const T*>(g.of[r] + parity_offset) + e));
  return from_f32<T>(acc);
}

/// In-place all_reduce of p.count elements (protocol: custom_all_reduce.cu). Grid: kBlocks x kThreads.
template <typename T, int kRanks>
__global__ void __launch_bounds__(kThreads) peer_all_reduce_kernel(AllReduceParams p) {
  griddep_wait();
  griddep_launch_dependents();  // all our blocks are resident by now: a dependent cannot starve them
  const uint32_t epoch = car_protocol::begin_call(p.g);  // step 1 (contains __syncthreads)
  constexpr uint64_t kElems = 16 / sizeof(T);  // elements per 16-byte pack
  const uint64_t packs = (p.count + kElems - 1) / kElems;
  const uint64_t per_block = (packs + kBlocks - 1) / kBlocks;
  const uint64_t e_begin = min(p.count, uint64_t(blockIdx.x) * per_block * kElems);
  const uint64_t e_end = min(p.count, e_begin + per_block * kElems);
  const uint64_t p_begin = e_begin / kElems;                   // e_begin is a multiple of kElems
  const uint64_t p_end = p_begin + (e_end - e_begin) / kElems;  // whole packs of the block's range
  // This rank's buffer alignment decides only how this rank moves its data, never where it is staged.
  const bool vec = (reinterpret_cast<uintptr_t>(p.buf) & 15) == 0;
  const uint64_t e_scalar = vec ? p_end * kElems : e_begin;  // elements [e_scalar, e_end) one by one
  const uint64_t parity_offset = (epoch & 1u) * p.g.data_bytes;
  T* const buf = static_cast<T*>(p.buf);
  T* const stage = reinterpret_cast<T*>(car_protocol::staging(p.g, p.g.rank, epoch));

  if (vec) copy_packs(reinterpret_cast<uint4*>(stage), reinterpret_cast<const uint4*>(buf), p_begin, p_end);
  for (uint64_t e = e_scalar + threadIdx.x; e < e_end; e += kThreads) stage[e] = buf[e];

  car_protocol::handshake<kRanks>(p.g, epoch);  // step 3

  if (vec) {
    constexpr int kUnroll = kRanks <= 2 ? 4 : (kRanks <= 4 ? 2 : 1);  // ~8 16-byte loads in flight
    uint4* const out = reinterpret_cast<uint4*>(buf);
    for (uint64_t i0 = p_begin + threadIdx.x; i0 < p_end; i0 += uint64_t(kThreads) * kUnroll) {
      uint4 v[kUnroll][kRanks];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const uint64_t i = i0 + uint64_t(u) * kThreads;
        if (i < p_end) {
#pragma unroll
          for (int r = 0; r < kRanks; ++r) v[u][r] = __ldcg(reinterpret_cast<const uint4*>(p.g.of[r] + parity_offset) + i);
        }
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const uint64_t i = i0 + uint64_t(u) * kThreads;
        if (i < p_end) out[i] = sum_packs<T, kRanks>(v[u]);
      }
    }
  }
  for (uint64_t e = e_scalar + threadIdx.x; e < e_end; e += kThreads)
    buf[e] = sum_element<T, kRanks>(p.g, parity_offset, e);
}

/// all_gather / broadcast / handshake of p.bytes (protocol: custom_all_reduce.cu). Grid: kBlocks x kThreads.
template <int kRanks>
__global__ void __launch_bounds__(kThreads) peer_gather_kernel(GatherParams p) {
  griddep_wait();
  griddep_launch_dependents();
  const uint32_t epoch = car_protocol::begin_call(p.g);
  const uint64_t packs = (p.bytes + 15) / 16;
  const uint64_t per_block = (packs + kBlocks - 1) / kBlocks;
  const uint64_t lo = min(p.bytes, uint64_t(blockIdx.x) * per_block * 16);
  const uint64_t hi = min(p.bytes, lo + per_block * 16);
  const uint64_t parity_offset = (epoch & 1u) * p.g.data_bytes;

  if (p.root < 0 || p.root == p.g.rank) copy_bytes(car_protocol::staging(p.g, p.g.rank, epoch), p.send, lo, hi);

  car_protocol::handshake<kRanks>(p.g, epoch);

  if (p.root < 0) {
#pragma unroll
    for (int r = 0; r < kRanks; ++r) copy_bytes(p.recv + uint64_t(r) * p.recv_stride, p.g.of[r] + parity_offset, lo, hi);
  } else if (p.root != p.g.rank) {
    copy_bytes(p.recv, car_protocol::staging(p.g, p.root, epoch), lo, hi);
  }
}

template <typename Params>
void fill_common(Params& k, const PeerRegions& r) {
  std::memset(&k, 0, sizeof(k));
  for (int i = 0; i < kMaxRanks; ++i) k.g.of[i] = r.regions[i];
  k.g.data_bytes = r.data_bytes;
  k.g.timeout_ns = r.timeout_ns;
  k.g.rank = r.rank;
}

template <typename T>
cudaError_t launch_all_reduce_t(int tp_size, const AllReduceParams& p, cudaStream_t stream) {
  const dim3 grid(kBlocks), block(kThreads);
  switch (tp_size) {
    case 2: return launch_pdl(peer_all_reduce_kernel<T, 2>, grid, block, 0, stream, p);
    case 3: return launch_pdl(peer_all_reduce_kernel<T, 3>, grid, block, 0, stream, p);
    case 4: return launch_pdl(peer_all_reduce_kernel<T, 4>, grid, block, 0, stream, p);
    case 5: return launch_pdl(peer_all_reduce_kernel<T, 5>, grid, block, 0, stream, p);
    case 6: return launch_pdl(peer_all_reduce_kernel<T, 6>, grid, block, 0, stream, p);
    case 7: return launch_pdl(peer_all_reduce_kernel<T, 7>, grid, block, 0, stream, p);
    case 8: return launch_pdl(peer_all_reduce_kernel<T, 8>, grid, block, 0, stream, p);
  }
  return cudaErrorInvalidValue;
}

}  // namespace

cudaError_t launch_peer_all_reduce(const PeerRegions& r, void* buf, size_t count, DType dtype, cudaStream_t stream) {
  if (count * dtype_size(dtype) > r.data_bytes || reinterpret_cast<uintptr_t>(buf) % dtype_size(dtype) != 0)
    return cudaErrorInvalidValue;
  AllReduceParams p;
  fill_common(p, r);
  p.buf = buf;
  p.count = count;
  cudaError_t e = cudaErrorInvalidValue;
  TPS_DISPATCH_DTYPE(dtype, T, e = launch_all_reduce_t<T>(r.size, p, stream));
  return e;
}

cudaError_t launch_peer_gather(const PeerRegions& r, const void* send, void* recv, size_t bytes, size_t recv_stride,
                               int root, cudaStream_t stream) {
  if (bytes > r.data_bytes || root >= r.size) return cudaErrorInvalidValue;
  GatherParams p;
  fill_common(p, r);
  p.send = static_cast<const uint8_t*>(send);
  p.recv = static_cast<uint8_t*>(recv);
  p.bytes = bytes;
  p.recv_stride = recv_stride;
  p.root = root < 0 ? -1 : root;
  const dim3 grid(kBlocks), block(kThreads);
  switch (r.size) {
    case 2: return launch_pdl(peer_gather_kernel<2>, grid, block, 0, stream, p);
    case 3: return launch_pdl(peer_gather_kernel<3>, grid, block, 0, stream, p);
    case 4: return launch_pdl(peer_gather_kernel<4>, grid, block, 0, stream, p);
    case 5: return launch_pdl(peer_gather_kernel<5>, grid, block, 0, stream, p);
    case 6: return launch_pdl(peer_gather_kernel<6>, grid, block, 0, stream, p);
    case 7: return launch_pdl(peer_gather_kernel<7>, grid, block, 0, stream, p);
    case 8: return launch_pdl(peer_gather_kernel<8>, grid, block, 0, stream, p);
  }
  return cudaErrorInvalidValue;
}

}  // namespace tpshard::cuda
