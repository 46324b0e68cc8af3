// gemv_row.cuh: the per-warp body of the decode GEMV (kernels/gemv.cu): one warp, or P warps that each
// stream a contiguous share of the row and add up in shared memory (split-K, RowPart), computes one
// output row (GatedAct: its gate and up rows) for all n tokens. Two ways to stream the weights:
//   - gemv_row_fifo (fifo_depth D > 0): every lane keeps a FIFO of D 16-byte chunks in shared memory, filled with
//     cp.async (Ampere+ asynchronous copy, no registers held while in flight). All D chunks of a lane
//     are requested before griddep_wait(), so a warp whose row fits (D x 512 bytes) has its whole row in
//     flight while the previous kernel still runs; later chunks are requested as earlier ones are used.
//   - gemv_row_registers (depth 0, the default): batches of kLoadsPerLane 16-byte loads into
//     registers, one batch in flight at a time per warp.
// Both accumulate in fp32 in the same order per lane (chunk c = 32 k + lane, elements in order) and
// finish with the same warp reduction and epilogue, so their results are bit-identical for the same P.
// Does not own: grids, launches, argument checks (kernels/gemv.cu).
#pragma once
#include <cstdint>

#include "kernels/activation_fn.cuh"
#include "kernels/common.cuh"
#include "kernels/gemv.cuh"
#include "kernels/pdl.cuh"

namespace tpshard::cuda::gemv_detail {

constexpr int kLoadsPerLane = 4;  ///< register path: 16-byte weight loads per lane per batch

/// 16-byte load of constant data (weights) through the read-only path without allocating in L1, which
/// keeps L1 for x (read once per row by every warp). volatile: stays ahead of griddep_wait().
__device__ __forceinline__ uint4 load_weights(const uint4* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

/// cp.async of 16 bytes global -> shared, bypassing L1 (.cg); completes asynchronously (PTX ISA,
/// "cp.async"). The copy belongs to the group closed by the next cp_async_commit().
__device__ __forceinline__ void cp_async16(uint4* smem, const uint4* gmem) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s), "l"(gmem) : "memory");
#else
  *smem = *gmem;
#endif
}
__device__ __forceinline__ void cp_async_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;" ::: "memory");
#endif
}
/// Wait until at most `Pending` of this thread's most recent cp.async groups are still in flight; the
/// older groups' data is then visible to this thread.
template <int Pending>
__device__ __forceinline__ void cp_async_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;" ::"n"(Pending) : "memory");
#endif
}

/// The 16 bytes v as 16 / sizeof(T) fp32 values, element 0 first (little-endian lanes of each word).
template <typename T> struct Unpack;
template <> struct Unpack<float> {
  static constexpr int kElems = 4;
  __device__ __forceinline__ static void run(const uint4& v, float (&f)[kElems]) {
    f[0] = __uint_as_float(v.x);
    f[1] = __uint_as_float(v.y);
    f[2] = __uint_as_float(v.z);
    f[3] = __uint_as_float(v.w);
  }
};
template <> struct Unpack<__half> {
  static constexpr int kElems = 8;
  __device__ __forceinline__ static void run(const uint4& v, float (&f)[kElems]) {
    const uint32_t u[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      f[2 * i] = __half2float(__ushort_as_half(static_cast<unsigned short>(u[i] & 0xffffu)));
      f[2 * i + 1] = __half2float(__ushort_as_half(static_cast<unsigned short>(u[i] >> 16)));
    }
  }
};
template <> struct Unpack<__nv_bfloat16> {
  static constexpr int kElems = 8;
  __device__ __forceinline__ static void run(const uint4& v, float (&f)[kElems]) {
    const uint32_t u[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {  // bf16 is the high half of an fp32: widening is a shift
      f[2 * i] = __uint_as_float(u[i] << 16);
      f[2 * i + 1] = __uint_as_float(u[i] & 0xffff0000u);
    }
  }
};

/// acc[t] += dot(chunk w, chunk c of token t's x), t < N; x is [N, nv] chunks.
template <typename T, int N>
__device__ __forceinline__ void fma_chunk(float (&acc)[N], const uint4& w, const uint4* x, int nv, int c) {
  constexpr int kVec = Unpack<T>::kElems;
  float wf[kVec];
  Unpack<T>::run(w, wf);
#pragma unroll
  for (int t = 0; t < N; ++t) {
    float xf[kVec];
    Unpack<T>::run(x[static_cast<int64_t>(t) * nv + c], xf);
#pragma unroll
    for (int e = 0; e < kVec; ++e) acc[t] = fmaf(wf[e], xf[e], acc[t]);
  }
}

/// Which share of its output row the calling warp streams: part `part` of the row's P warps (a
/// template parameter of the kernel), which are warps [warp - part, warp - part + P) of the block.
struct RowPart {
  int part, warp;
};

/// Chunk range [begin, end) of a segment of nv 16-byte chunks that part `part` of P streams: a
/// contiguous share of the segment's 512-byte warp steps (chunk c = 32 k + lane), so each lane still
/// reads its chunks in ascending order; empty (begin == end) when the segment has fewer steps than P.
struct ChunkRange {
  int begin, end;
};
template <int P>
__device__ __forceinline__ ChunkRange part_range(int nv, int part) {
  if constexpr (P == 1) return {0, nv};
  const int steps = (nv + 31) >> 5;
  const int begin = steps * part / P * 32, end = steps * (part + 1) / P * 32;
  return {begin, end < nv ? end : nv};
}

/// bar.sync 0: waits until every thread of the block has arrived once at barrier 0 (from any call
/// site: PTX counts arrivals per barrier), and orders their shared-memory accesses (PTX ISA, "bar").
__device__ __forceinline__ void block_barrier() { asm volatile("bar.sync 0;" ::: "memory"); }

/// What a warp without a row does in a kernel with P > 1 warps per row: its one arrival at the
/// barrier of gemv_finish, which every warp of the block must reach.
template <int P>
__device__ __forceinline__ void gemv_no_row() {
  if constexpr (P > 1) block_barrier();
}

/// Reduce the lanes' partial sums and write y[t, row] = epilogue(...) (lane t writes token t). With
/// P > 1 the row's parts 1.. hand their sums to part 0 through shared memory (one block_barrier for
/// the whole block), which adds them in part order (deterministic) and alone writes y. acc[0] is the
/// product (GatedAct: the gate), acc[1] the up row (GatedAct only).
template <typename T, int N, GemvEpilogue E, int P>
__device__ __forceinline__ void gemv_finish(const GemvArgs& a, float (&acc)[2][N], int row, int lane, const RowPart& p) {
  constexpr int kRows = E == GemvEpilogue::GatedAct ? 2 : 1;
#pragma unroll
  for (int r = 0; r < kRows; ++r)
#pragma unroll
    for (int t = 0; t < N; ++t) acc[r][t] = warp_sum(acc[r][t]);
  if constexpr (P > 1) {
    __shared__ float shares[8][kRows][N];  // per warp of the block (at most 8)
    if (p.part > 0 && lane == 0) {
#pragma unroll
      for (int r = 0; r < kRows; ++r)
#pragma unroll
        for (int t = 0; t < N; ++t) shares[p.warp][r][t] = acc[r][t];
    }
    block_barrier();
    if (p.part > 0) return;
#pragma unroll
    for (int q = 1; q < P; ++q)
#pragma unroll
      for (int r = 0; r < kRows; ++r)
#pragma unroll
        for (int t = 0; t < N; ++t) acc[r][t] += shares[p.warp + q][r][t];
  }

  // Every lane holds every sum; lane t finishes token t (N <= 8 < 32).
  const bool out_f32 = a.out_dtype == DType::F32;
  const T* bias = static_cast<const T*>(a.bias);
#pragma unroll
  for (int t = 0; t < N; ++t) {
    if (lane != t) continue;
    const int64_t yi = static_cast<int64_t>(t) * a.out + row;
    float v = acc[0][t] + (bias ? to_f32(bias[row]) : 0.f);
    if (E == GemvEpilogue::None) {
      if (a.beta != 0.f)
        v += a.beta * (out_f32 ? static_cast<const float*>(a.y)[yi] : to_f32(static_cast<const T*>(a.y)[yi]));
    } else if (E == GemvEpilogue::Act) {
      v = apply_act(v, a.act);
    } else {
      const float up = acc[kRows - 1][t] + (bias ? to_f32(bias[a.out + row]) : 0.f);
      v = apply_act(v, a.act) * up;
    }
    if (out_f32) static_cast<float*>(a.y)[yi] = v;
    else static_cast<T*>(a.y)[yi] = from_f32<T>(v);
  }
}

/// The (up to) two weight segments of one output row, in 16-byte chunks: segment 0 is row `row` of w
/// (times x); segment 1 is the up row `out + row` of w (GatedAct, times x, into acc[1]) or row `row` of
/// w2 (None with x2: times x2, into acc[0]); nv1 == 0 when there is none.
struct RowSegments {
  const uint4 *w0, *x0, *w1, *x1;
  int nv0, nv1;
};

template <typename T, GemvEpilogue E>
__device__ __forceinline__ RowSegments row_segments(const GemvArgs& a, int row) {
  constexpr int kVec = Unpack<T>::kElems;
  RowSegments s;
  s.nv0 = a.in / kVec;  // gemv_supported: in % kVec == 0
  s.w0 = static_cast<const uint4*>(a.w) + static_cast<int64_t>(row) * s.nv0;
  s.x0 = static_cast<const uint4*>(a.x);
  s.w1 = s.x1 = nullptr;
  s.nv1 = 0;
  if (E == GemvEpilogue::GatedAct) {
    s.nv1 = s.nv0;
    s.w1 = static_cast<const uint4*>(a.w) + (static_cast<int64_t>(row) + a.out) * s.nv0;
    s.x1 = s.x0;
  } else if (E == GemvEpilogue::None && a.x2) {
    s.nv1 = a.in2 / kVec;
    s.w1 = static_cast<const uint4*>(a.w2) + static_cast<int64_t>(row) * s.nv1;
    s.x1 = static_cast<const uint4*>(a.x2);
  }
  return s;
}

/// True when this row streams its second input segment first, before griddep_wait() (GemvArgs::x2_early).
template <GemvEpilogue E>
__device__ __forceinline__ bool x2_early_row(const GemvArgs& a, const RowSegments& s) {
  return E == GemvEpilogue::None && a.x2_early && s.nv1 > 0;
}
/// s with its two segments exchanged (x2_early: x2 W2^T is streamed first).
__device__ __forceinline__ RowSegments swapped(const RowSegments& s) { return {s.w1, s.x1, s.w0, s.x0, s.nv1, s.nv0}; }

/// One output row through a per-lane shared-memory FIFO of D chunks (D a power of 2); `fifo` is this
/// warp's D * 32 uint4. Lane l streams chunks c = 32 k + l of segment 0, then of segment 1 (x2_early: the
/// other way round, and griddep_wait() between the two instead of before the first); chunk k of
/// the lane's stream lives in slot k % D. Each lane reads back only what it copied itself, so
/// cp.async.wait_group orders everything: no warp or block barrier.
template <typename T, int N, GemvEpilogue E, int D, int P>
__device__ __forceinline__ void gemv_row_fifo(const GemvArgs& a, int row, int lane, const RowPart& p, uint4* fifo) {
  static_assert(D >= 2 && (D & (D - 1)) == 0, "FIFO depth must be a power of 2");
  const RowSegments s0 = row_segments<T, E>(a, row);
  const bool early = x2_early_row<E>(a, s0);
  const RowSegments s = early ? swapped(s0) : s0;  // streamed in order: segment "0", then "1"
  const ChunkRange r0 = part_range<P>(s.nv0, p.part), r1 = part_range<P>(s.nv1, p.part);  // this warp's share
  const int k0 = (r0.end - r0.begin + 31) >> 5, kt = k0 + ((r1.end - r1.begin + 31) >> 5);  // chunks per lane
  uint4* slots = fifo + lane;
  // Request stream chunk k into its slot (nothing past the share's end); always close a group, so that
  // "group k is complete" is "at most D - 1 groups pending" after the D-th later commit.
  auto request = [&](int k) {
    if (k < kt) {
      const bool first = k < k0;
      const int c = (first ? r0.begin + k * 32 : r1.begin + (k - k0) * 32) + lane;
      if (c < (first ? r0.end : r1.end)) cp_async16(slots + (k & (D - 1)) * 32, (first ? s.w0 : s.w1) + c);
    }
    cp_async_commit();
  };
#pragma unroll
  for (int k = 0; k < D; ++k) request(k);
  if (!early) griddep_wait();  // x, x2 and y_old are written by the previous kernel(s)

  float acc[2][N];
#pragma unroll
  for (int r = 0; r < 2; ++r)
#pragma unroll
    for (int t = 0; t < N; ++t) acc[r][t] = 0.f;
  constexpr int kUp = E == GemvEpilogue::GatedAct ? 1 : 0;  // accumulator of the second segment
#pragma unroll 4
  for (int k = 0; k < k0; ++k) {
    cp_async_wait<D - 1>();
    const int c = r0.begin + k * 32 + lane;
    if (c < r0.end) fma_chunk<T, N>(acc[0], slots[(k & (D - 1)) * 32], s.x0, s.nv0, c);
    request(k + D);  // after the slot's value was used
  }
  if (early) griddep_wait();  // x (and y_old) are written by the previous kernel
#pragma unroll 4
  for (int k = k0; k < kt; ++k) {
    cp_async_wait<D - 1>();
    const int c = r1.begin + (k - k0) * 32 + lane;
    if (c < r1.end) fma_chunk<T, N>(acc[kUp], slots[(k & (D - 1)) * 32], s.x1, s.nv1, c);
    request(k + D);
  }
  cp_async_wait<0>();  // nothing may still be landing in this warp's slots when the block ends
  // Let the next kernel launch only now (see gemv_row_registers).
  griddep_launch_dependents();
  gemv_finish<T, N, E, P>(a, acc, row, lane, p);
}

/// One output row (this warp's share of it) with register batches of kLoadsPerLane chunks per lane (the default, FIFO
/// depth 0). Weights of the first batch are loaded before griddep_wait(); x (and x2, y_old) only after,
/// except with x2_early: the whole x2 W2^T segment runs before the wait.
template <typename T, int N, GemvEpilogue E, int P>
__device__ __forceinline__ void gemv_row_registers(const GemvArgs& a, int row, int lane, const RowPart& p) {
  constexpr int kRows = E == GemvEpilogue::GatedAct ? 2 : 1;  // gate row `row` and up row `out + row`
  constexpr int kUnroll = kLoadsPerLane / kRows;
  constexpr int kStep = 32 * kUnroll;  // 16-byte chunks of a row per batch of the warp
  const RowSegments s0 = row_segments<T, E>(a, row);
  const bool early = x2_early_row<E>(a, s0);
  const RowSegments s = early ? swapped(s0) : s0;  // streamed in order: segment "0", then "1"
  const ChunkRange r0 = part_range<P>(s.nv0, p.part), r1 = part_range<P>(s.nv1, p.part);  // this warp's share
  const uint4* w[kRows] = {s.w0};
  if constexpr (kRows == 2) w[1] = s.w1;

  // Chunk c = base + 32 u + lane (c < end): at each u the warp reads 512 contiguous bytes of each row.
  uint4 wv[kRows][kUnroll];
  auto load_batch = [&](const uint4* const* ws, int end, int base) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int c = base + u * 32 + lane;
#pragma unroll
      for (int r = 0; r < kRows; ++r) wv[r][u] = c < end ? load_weights(ws[r] + c) : make_uint4(0, 0, 0, 0);
    }
  };

  load_batch(w, r0.end, r0.begin);
  if (!early) griddep_wait();  // x and y_old are written by the previous kernel(s)

  float acc[2][N];
#pragma unroll
  for (int r = 0; r < 2; ++r)
#pragma unroll
    for (int t = 0; t < N; ++t) acc[r][t] = 0.f;

  // acc += x W^T over chunks [range.begin, range.end) of one input segment of nv chunks (x's row
  // stride), whose first batch is already in wv
  auto run = [&](const uint4* const* ws, const uint4* x, int nv, const ChunkRange& range) {
    for (int base = range.begin;;) {
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int c = base + u * 32 + lane;
        if (c < range.end) {
#pragma unroll
          for (int r = 0; r < kRows; ++r) fma_chunk<T, N>(acc[r], wv[r][u], x, nv, c);
        }
      }
      base += kStep;
      if (base >= range.end) break;
      load_batch(ws, range.end, base);
    }
  };
  run(w, s.x0, s.nv0, r0);
  if constexpr (E == GemvEpilogue::None) {
    if (s.nv1 > 0) {  // second input segment into the same accumulators
      const uint4* w2[1] = {s.w1};
      load_batch(w2, r1.end, r1.begin);
      if (early) griddep_wait();  // x (and y_old) are written by the previous kernel
      run(w2, s.x1, s.nv1, r1);
    }
  }

  // Let the next kernel launch only now: triggered right after griddep_wait(), its blocks sat in
  // their own wait holding SM slots that this kernel's later blocks needed (tp 2 Llama-7B stack: 83% of
  // HBM bandwidth with this placement, 76% with the early one).
  griddep_launch_dependents();
  gemv_finish<T, N, E, P>(a, acc, row, lane, p);
}

}  // namespace tpshard::cuda::gemv_detail
