// all_reduce_norm.cu: CustomAllReduce::all_reduce_add_norm (custom_all_reduce.h): the all_reduce of a
// row-parallel layer's partial sums fused with the residual add and norm that follow it (one kernel
// instead of two per all_reduce at decode). Same flag protocol as the one-shot all_reduce
// (custom_all_reduce_protocol.cuh), but each block owns whole ROWS (rows b, b + kBlocks, ...) so that it can
// normalize them; the sum is rounded once to the activation dtype before it is added, exactly as the
// unfused all_reduce_sum + add_norm pair does. Decode-sized 16-bit messages take the lamport path
// instead (lamport_add_norm_kernel: pushed rows, no flags). The fusion of the all-reduce with the residual
// add and RMSNorm is the technique of TensorRT-LLM's fused allreduce kernels (read to learn; own
// implementation).
#include <cstring>

#include "kernels/common.cuh"
#include "kernels/pdl.cuh"
#include "runtime/cuda/check.h"
#include "runtime/cuda/custom_all_reduce.h"
#include "runtime/cuda/custom_all_reduce_protocol.cuh"

namespace tpshard::cuda {
namespace {

using namespace car_protocol;

/// Largest row, in 16-byte packs per thread (values stay in registers between the add and the norm).
constexpr int kMaxPacksPerThread = 4;

struct FusedParams {
  Regions g;
  AddNormParams a;  ///< a.add0 = this rank's partial sums
  int row_packs;    ///< hidden * sizeof(T) / 16
};

template <typename T>
__device__ __forceinline__ float opt(const void* p, int64_t i) {
  return p ? to_f32(static_cast<const T*>(p)[i]) : 0.f;
}

/// Row `row` of the fused call once the all_reduce's sum of each 16-byte pack i of the row is known
/// (sum_of(i), called once per pack by the thread that owns it): residual += sum + biases, then the norm
/// into out0 (and out1), as add_norm does. Contains __syncthreads (block_sum): every thread of the block
/// must call it for the same rows.
template <typename T, bool kLayerNorm, typename SumOf>
__device__ __forceinline__ void add_norm_row(const FusedParams& p, int row, float* scratch, SumOf&& sum_of) {
  constexpr int kElems = 16 / sizeof(T);
  const AddNormParams& a = p.a;
  float v[kMaxPacksPerThread][kElems];
  float* const x = a.residual + static_cast<int64_t>(row) * a.hidden;
  float s = 0.f;
#pragma unroll
  for (int k = 0; k < kMaxPacksPerThread; ++k) {
    const int i = threadIdx.x + k * kThreads;
    if (i >= p.row_packs) continue;
    const uint4 sum = sum_of(i);  // the all_reduce's bits: fp32 in rank order, rounded once
    const T* const se = reinterpret_cast<const T*>(&sum);
    float4* const x4 = reinterpret_cast<float4*>(x + i * kElems);
#pragma unroll
    for (int q = 0; q < kElems / 4; ++q) {
      float4 xv = x4[q];
      float* xe = reinterpret_cast<float*>(&xv);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int e = i * kElems + q * 4 + j;
        // as add_norm: v = x; v += add0 (the all_reduce's sum); v += bias0 + bias1
        float t = xe[j];
        t += to_f32(se[q * 4 + j]);
        t += opt<T>(a.add_bias0, e) + opt<T>(a.add_bias1, e);
        xe[j] = t;
        v[k][q * 4 + j] = t;
        s += t;
      }
      x4[q] = xv;
    }
  }
  const float mean = kLayerNorm ? block_sum(s, scratch) / a.hidden : 0.f;
  float ss = 0.f;
#pragma unroll
  for (int k = 0; k < kMaxPacksPerThread; ++k) {
    if (threadIdx.x + k * kThreads >= p.row_packs) continue;
#pragma unroll
    for (int j = 0; j < kElems; ++j) {
      const float d = v[k][j] - mean;
      ss += d * d;
    }
  }
  const float rstd = rsqrtf(block_sum(ss, scratch) / a.hidden + a.eps);
  T* const out0 = static_cast<T*>(a.out0) + static_cast<int64_t>(row) * a.hidden;
  T* const out1 = a.out1 ? static_cast<T*>(a.out1) + static_cast<int64_t>(row) * a.hidden : nullptr;
#pragma unroll
  for (int k = 0; k < kMaxPacksPerThread; ++k) {
    const int i = threadIdx.x + k * kThreads;
    if (i >= p.row_packs) continue;
    uint4 o0, o1;
    T* e0 = reinterpret_cast<T*>(&o0);
    T* e1 = reinterpret_cast<T*>(&o1);
#pragma unroll
    for (int j = 0; j < kElems; ++j) {
      const int e = i * kElems + j;
      const float y = (v[k][j] - mean) * rstd;
      e0[j] = from_f32<T>(y * opt<T>(a.weight0, e) + opt<T>(a.bias0, e));
      if (out1) e1[j] = from_f32<T>(y * opt<T>(a.weight1, e) + opt<T>(a.bias1, e));
    }
    reinterpret_cast<uint4*>(out0)[i] = o0;
    if (out1) reinterpret_cast<uint4*>(out1)[i] = o1;
  }
}

/// The flag protocol (custom_all_reduce.cu): stage, handshake, read every rank's staging buffer.
template <typename T, int kRanks, bool kLayerNorm>
__global__ void __launch_bounds__(kThreads) all_reduce_add_norm_kernel(FusedParams p) {
  __shared__ float scratch[32];
  griddep_wait();
  griddep_launch_dependents();  // all our blocks are resident by now: a dependent cannot starve them
  const AddNormParams& a = p.a;
  const int b = blockIdx.x;
  const uint32_t epoch = begin_call(p.g);
  const uint4* const part = static_cast<const uint4*>(a.add0);
  uint4* const stage_self = reinterpret_cast<uint4*>(staging(p.g, p.g.rank, epoch));
  for (int row = b; row < a.n; row += kBlocks)
    for (int i = threadIdx.x; i < p.row_packs; i += kThreads)
      stage_self[static_cast<int64_t>(row) * p.row_packs + i] = part[static_cast<int64_t>(row) * p.row_packs + i];
  handshake<kRanks>(p.g, epoch);
  for (int row = b; row < a.n; row += kBlocks)
    add_norm_row<T, kLayerNorm>(p, row, scratch, [&](int i) {
      uint4 pk[kRanks];
#pragma unroll
      for (int r = 0; r < kRanks; ++r)
        pk[r] = __ldcg(reinterpret_cast<const uint4*>(staging(p.g, r, epoch)) + static_cast<int64_t>(row) * p.row_packs + i);
      return sum_packs<T, kRanks>(pk);
    });
}

// ---- the lamport path: 16-bit dtypes, messages of at most kLamportBytes ----

/// v with every -0.0 half (kLamportEmpty) made +0.0, so that no pushed element looks empty. The sum of
/// the ranks' values is unchanged except for the sign of an exact zero.
__device__ __forceinline__ uint4 positive_zero(uint4 v) {
  uint32_t* w = reinterpret_cast<uint32_t*>(&v);
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    if ((w[k] & 0xffffu) == kLamportEmpty) w[k] &= 0xffff0000u;
    if ((w[k] >> 16) == kLamportEmpty) w[k] &= 0x0000ffffu;
  }
  return v;
}

__device__ __forceinline__ bool has_empty(const uint4& v) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
  bool e = false;
#pragma unroll
  for (int k = 0; k < 4; ++k) e |= (w[k] & 0xffffu) == kLamportEmpty || (w[k] >> 16) == kLamportEmpty;
  return e;
}

__device__ __forceinline__ void st_volatile(uint4* p, const uint4& v) {
  asm volatile("st.volatile.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z),
               "r"(v.w)
               : "memory");
}

__device__ __forceinline__ uint4 ld_volatile(const uint4* p) {
  uint4 v;
  asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p)
               : "memory");
  return v;
}

/// Spin until the pack at p (pushed by rank `peer`) has no empty element, with SpinTimeout.
__device__ __forceinline__ uint4 wait_pack(const uint4* p, uint64_t timeout_ns, int rank, int peer) {
  SpinTimeout timeout(timeout_ns, rank, peer);
  for (;;) {
    const uint4 v = ld_volatile(p);
    if (!has_empty(v)) return v;
    timeout.tick();
  }
}

/// The lamport path (the technique of TensorRT-LLM's "lamport" all-reduce buffers; own implementation):
/// every rank pushes its rows straight into every peer's receive buffer with remote stores, and waits
/// only on its own local memory until no element of a pack is empty (-0.0): one one-way NVLink trip,
/// no staging copy, no flag, no remote read. Block b owns rows b, b + gridDim.x, ... (grid = min(n,
/// kBlocks), so row r always belongs to block r % kBlocks) and uses slot counters[b] % kLamportSlots.
/// Why a slot can be reused: the reader clears (sets to empty) every pack right after reading it, in
/// the call that read it. Rank q pushes into slot s of rank i again only kLamportSlots calls of block b
/// later; q can be at most one call ahead of i (q's call c + 1 needs q's call c complete, which needs
/// i's pushes of call c), so q's next push into slot s comes after i's call that cleared it is
/// complete (kernel completion makes the clearing stores visible before any later kernel of i pushes
/// to q, and q needs that push first).
template <typename T, int kRanks, bool kLayerNorm>
__global__ void __launch_bounds__(kThreads) lamport_add_norm_kernel(FusedParams p) {
  static_assert(sizeof(T) == 2, "the lamport path marks empty 16-bit elements");
  __shared__ float scratch[32];
  griddep_wait();
  griddep_launch_dependents();  // our blocks are resident: a dependent cannot starve them
  const AddNormParams& a = p.a;
  const int rank = p.g.rank, grid = static_cast<int>(gridDim.x);
  uint32_t* const counter = lamport_counters(p.g) + blockIdx.x;
  const uint4* const part = static_cast<const uint4*>(a.add0);
  const uint32_t call = *counter;  // independent of the partial-sum loads below: they overlap
  const int slot = static_cast<int>(call % kLamportSlots);
  for (int row = blockIdx.x; row < a.n; row += grid)
    for (int i = threadIdx.x; i < p.row_packs; i += kThreads) {
      const int64_t at = static_cast<int64_t>(row) * p.row_packs + i;
      const uint4 v = positive_zero(part[at]);
#pragma unroll
      for (int q = 0; q < kRanks; ++q)
        if (q != rank) st_volatile(lamport_buffer(p.g, q, slot, rank) + at, v);
    }
  const uint4 empty = make_uint4(0x80008000u, 0x80008000u, 0x80008000u, 0x80008000u);
  for (int row = blockIdx.x; row < a.n; row += grid)
    add_norm_row<T, kLayerNorm>(p, row, scratch, [&](int i) {
      const int64_t at = static_cast<int64_t>(row) * p.row_packs + i;
      uint4 pk[kRanks];
#pragma unroll
      for (int r = 0; r < kRanks; ++r) {
        if (r == rank) {
          pk[r] = positive_zero(part[at]);
        } else {
          uint4* const in = lamport_buffer(p.g, rank, slot, r) + at;
          pk[r] = wait_pack(in, p.g.timeout_ns, rank, r);
          *in = empty;
        }
      }
      return sum_packs<T, kRanks>(pk);
    });
  if (threadIdx.x == 0) *counter = call + 1;  // after block_sum's barriers: every thread has read it
}

/// The fused kernel of one protocol for kRanks ranks.
template <typename T, bool kLayerNorm, bool kLamport, int kRanks>
constexpr auto fused_kernel() {
  if constexpr (kLamport)
    return lamport_add_norm_kernel<T, kRanks, kLayerNorm>;
  else
    return all_reduce_add_norm_kernel<T, kRanks, kLayerNorm>;
}

template <typename T, bool kLayerNorm, bool kLamport>
cudaError_t launch_ranks(int tp_size, dim3 grid, const FusedParams& p, cudaStream_t stream) {
  const dim3 block(kThreads);
  switch (tp_size) {
    case 2:
      return launch_pdl(fused_kernel<T, kLayerNorm, kLamport, 2>(), grid, block, 0, stream, p);
    case 3:
      return launch_pdl(fused_kernel<T, kLayerNorm, kLamport, 3>(), grid, block, 0, stream, p);
    case 4:
      return launch_pdl(fused_kernel<T, kLayerNorm, kLamport, 4>(), grid, block, 0, stream, p);
    case 5:
      return launch_pdl(fused_kernel<T, kLayerNorm, kLamport, 5>(), grid, block, 0, stream, p);
    case 6:
      return launch_pdl(fused_kernel<T, kLayerNorm, kLamport, 6>(), grid, block, 0, stream, p);
    case 7:
      return launch_pdl(fused_kernel<T, kLayerNorm, kLamport, 7>(), grid, block, 0, stream, p);
    case 8:
      return launch_pdl(fused_kernel<T, kLayerNorm, kLamport, 8>(), grid, block, 0, stream, p);
  }
  return cudaErrorInvalidValue;
}

/// The lamport path (one block per row, at most kBlocks) for 16-bit T when `lamport`, else the flag path.
template <typename T, bool kLayerNorm>
cudaError_t launch_fused(int tp_size, bool lamport, const FusedParams& p, cudaStream_t stream) {
  if constexpr (sizeof(T) == 2) {
    if (lamport)
      return launch_ranks<T, kLayerNorm, true>(
          tp_size, dim3(static_cast<unsigned>(p.a.n < kBlocks ? p.a.n : kBlocks)), p, stream);
  }
  return launch_ranks<T, kLayerNorm, false>(tp_size, dim3(kBlocks), p, stream);
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

bool CustomAllReduce::add_norm_eligible(const AddNormParams& a) const {
  if (region_ == nullptr || a.n <= 0 || a.hidden <= 0 || !a.add0 || !a.residual || !a.weight0 || !a.out0) return false;
  if (a.add0_weight || a.weight_offset != 0.f) return false;  // Gemma 2's norms: all_reduce_sum + add_norm
  if (!a.normalize0) return false;                            // OLMo 2's un-normalized block input: likewise
  if (a.dtype != DType::F32 && a.dtype != DType::F16 && a.dtype != DType::BF16) return false;
  const size_t row_bytes = static_cast<size_t>(a.hidden) * dtype_size(a.dtype);
  if (row_bytes % 16 != 0 || a.hidden % 4 != 0) return false;
  if (row_bytes / 16 > static_cast<size_t>(kMaxPacksPerThread) * kThreads) return false;
  if (static_cast<size_t>(a.n) * row_bytes > max_bytes_) return false;
  return aligned16(a.add0) && aligned16(a.residual) && aligned16(a.out0) && (!a.out1 || aligned16(a.out1));
}

bool CustomAllReduce::lamport_eligible(const AddNormParams& a) const {
  return lamport_ && add_norm_eligible(a) && a.dtype != DType::F32 &&
         static_cast<size_t>(a.n) * a.hidden * dtype_size(a.dtype) <= kLamportBytes;
}

void CustomAllReduce::all_reduce_add_norm(const AddNormParams& a, cudaStream_t stream) {
  TPS_CHECK(add_norm_eligible(a),
            "custom all_reduce + add_norm: " + std::to_string(a.n) + " rows of " + std::to_string(a.hidden) + " " +
                dtype_name(a.dtype) + " are not eligible",
            "call add_norm_eligible() first and use all_reduce_sum + add_norm otherwise");
  int dev = -1;
  TPS_CUDA_CHECK(cudaGetDevice(&dev));
  TPS_CHECK(dev == device_,
            "custom all_reduce: called on device " + std::to_string(dev) + ", created on device " + std::to_string(device_),
            "call cudaSetDevice for this rank's GPU first");
  FusedParams p;
  std::memset(&p, 0, sizeof(p));
  for (int r = 0; r < size_; ++r) p.g.of[r] = static_cast<uint8_t*>(peer_region_[r]);
  p.g.data_bytes = data_bytes_;
  p.g.timeout_ns = timeout_ns_;
  p.g.rank = rank_;
  p.a = a;
  p.row_packs = static_cast<int>(static_cast<size_t>(a.hidden) * dtype_size(a.dtype) / 16);
  const bool lamport = lamport_eligible(a);
  cudaError_t e = cudaSuccess;
  if (a.kind == NormKind::LayerNorm) {
    TPS_DISPATCH_DTYPE(a.dtype, T, e = (launch_fused<T, true>(size_, lamport, p, stream)));
  } else {
    TPS_DISPATCH_DTYPE(a.dtype, T, e = (launch_fused<T, false>(size_, lamport, p, stream)));
  }
  TPS_CUDA_CHECK(e);
}

}  // namespace tpshard::cuda
