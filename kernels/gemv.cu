// gemv.cu: the decode-path GEMV with fused bias / beta / activation epilogues (see gemv.cuh).
// One warp per output row walks the row with 16-byte loads, kLoadsPerLane of them in flight per lane,
// and accumulates the dot products of all n tokens at once (n is a template parameter, so the
// accumulators stay in registers). The warp's first batch of weight loads is issued before
// griddep_wait(): weights are constant, x and y are produced by earlier kernels. The next kernel is
// released (griddep_launch_dependents) after the warp's last weight batch, before its reduction.
#include "kernels/gemv.cuh"

#include <cstdint>
#include <string>

#include "kernels/activation_fn.cuh"
#include "kernels/common.cuh"
#include "kernels/pdl.cuh"

namespace tpshard::cuda {
namespace {

// Measured on H200 (graphs, stacks of Pythia-1.4B / Llama-7B layers at n 1..8): 4 warps x 4 loads
// beat 8x8, 8x4, 4x8, 4x2 and 2x4 by 1-10%, and a persistent grid with double-buffered batches.
constexpr int kWarpsPerBlock = 4;
constexpr int kLoadsPerLane = 4;  // 16-byte weight loads per lane per batch (over all rows of the warp)

/// 16-byte load of constant data (weights) through the read-only path without allocating in L1, which
/// keeps L1 for x (read once per row by every warp). volatile: stays ahead of griddep_wait().
__device__ __forceinline__ uint4 load_weights(const uint4* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
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

/// One output row (GatedAct: its gate and up rows) of a, computed by the calling warp. Weights of the
/// first batch are loaded before griddep_wait(); x (and x2, y_old) only after it.
template <typename T, int N, GemvEpilogue E>
__device__ __forceinline__ void gemv_row(const GemvArgs& a, int row, int lane) {
  constexpr int kVec = Unpack<T>::kElems;
  constexpr int kRows = E == GemvEpilogue::GatedAct ? 2 : 1;  // gate row `row` and up row `out + row`
  constexpr int kUnroll = kLoadsPerLane / kRows;
  constexpr int kStep = 32 * kUnroll;  // 16-byte chunks of a row per batch of the warp
  const int nvec = a.in / kVec;  // chunks per row (gemv_supported: in % kVec == 0)
  const uint4* w[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r)
    w[r] = static_cast<const uint4*>(a.w) + (static_cast<int64_t>(row) + static_cast<int64_t>(r) * a.out) * nvec;

  // Chunk c = base + 32 u + lane: at each u the warp reads 512 contiguous bytes of each row.
  uint4 wv[kRows][kUnroll];
  auto load_batch = [&](const uint4* const* ws, int nv, int base) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int c = base + u * 32 + lane;
#pragma unroll
      for (int r = 0; r < kRows; ++r) wv[r][u] = c < nv ? load_weights(ws[r] + c) : make_uint4(0, 0, 0, 0);
    }
  };

  load_batch(w, nvec, 0);
  griddep_wait();  // x and y_old are written by the previous kernel(s)

  float acc[kRows][N];
#pragma unroll
  for (int r = 0; r < kRows; ++r)
#pragma unroll
    for (int t = 0; t < N; ++t) acc[r][t] = 0.f;

  // acc += x W^T over one input segment whose first batch is already in wv
  auto run = [&](const uint4* const* ws, const uint4* x, int nv) {
    for (int base = 0;;) {
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int c = base + u * 32 + lane;
        if (c < nv) {
          float wf[kRows][kVec];
#pragma unroll
          for (int r = 0; r < kRows; ++r) Unpack<T>::run(wv[r][u], wf[r]);
#pragma unroll
          for (int t = 0; t < N; ++t) {
            float xf[kVec];
            Unpack<T>::run(x[static_cast<int64_t>(t) * nv + c], xf);
#pragma unroll
            for (int r = 0; r < kRows; ++r)
#pragma unroll
              for (int e = 0; e < kVec; ++e) acc[r][t] = fmaf(wf[r][e], xf[e], acc[r][t]);
          }
        }
      }
      base += kStep;
      if (base >= nv) break;
      load_batch(ws, nv, base);
    }
  };
  run(w, static_cast<const uint4*>(a.x), nvec);
  if constexpr (E == GemvEpilogue::None) {
    if (a.x2) {  // second input segment into the same accumulators
      const int nvec2 = a.in2 / kVec;
      const uint4* w2[1] = {static_cast<const uint4*>(a.w2) + static_cast<int64_t>(row) * nvec2};
      load_batch(w2, nvec2, 0);
      run(w2, static_cast<const uint4*>(a.x2), nvec2);
    }
  }

  // Let the next kernel launch only now: triggered right after griddep_wait(), its blocks sat in
  // their own wait holding SM slots that this kernel's later blocks needed (tp 2 Llama-7B stack: 83% of
  // HBM bandwidth with this placement, 76% with the early one).
  griddep_launch_dependents();
#pragma unroll
  for (int r = 0; r < kRows; ++r)
#pragma unroll
    for (int t = 0; t < N; ++t) acc[r][t] = warp_sum(acc[r][t]);

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

/// Grid: ceil(out / kWarpsPerBlock) blocks of kWarpsPerBlock warps; warp -> output row `row`.
template <typename T, int N, GemvEpilogue E>
__global__ void __launch_bounds__(kWarpsPerBlock * 32) gemv_kernel(GemvArgs a) {
  const int row = blockIdx.x * kWarpsPerBlock + static_cast<int>(threadIdx.x >> 5);
  if (row >= a.out) return;  // writes nothing; other warps of the grid wait for the previous kernel
  gemv_row<T, N, E>(a, row, threadIdx.x & 31);
}

/// Two independent products in one launch: blocks [0, blocks0) compute a0, the rest a1.
struct GemvPairParams {
  GemvArgs a0, a1;
  int blocks0;
};

template <typename T, int N, GemvEpilogue E0, GemvEpilogue E1>
__global__ void __launch_bounds__(kWarpsPerBlock * 32) gemv_pair_kernel(GemvPairParams p) {
  const int warp = static_cast<int>(threadIdx.x >> 5), lane = threadIdx.x & 31;
  if (static_cast<int>(blockIdx.x) < p.blocks0) {
    const int row = blockIdx.x * kWarpsPerBlock + warp;
    if (row < p.a0.out) gemv_row<T, N, E0>(p.a0, row, lane);
  } else {
    const int row = (blockIdx.x - p.blocks0) * kWarpsPerBlock + warp;
    if (row < p.a1.out) gemv_row<T, N, E1>(p.a1, row, lane);
  }
}

template <typename T, int N>
cudaError_t launch_pair(const GemvArgs& a0, const GemvArgs& a1, cudaStream_t stream) {
  GemvPairParams p{a0, a1, (a0.out + kWarpsPerBlock - 1) / kWarpsPerBlock};
  const unsigned blocks = static_cast<unsigned>(p.blocks0 + (a1.out + kWarpsPerBlock - 1) / kWarpsPerBlock);
  return launch_pdl(gemv_pair_kernel<T, N, GemvEpilogue::None, GemvEpilogue::Act>, dim3(blocks),
                    dim3(kWarpsPerBlock * 32), 0, stream, p);
}

template <typename T, int N, GemvEpilogue E>
cudaError_t launch(const GemvArgs& a, cudaStream_t stream) {
  const unsigned blocks = static_cast<unsigned>((a.out + kWarpsPerBlock - 1) / kWarpsPerBlock);
  return launch_pdl(gemv_kernel<T, N, E>, dim3(blocks), dim3(kWarpsPerBlock * 32), 0, stream, a);
}

template <typename T, GemvEpilogue E>
cudaError_t launch_n(const GemvArgs& a, cudaStream_t stream) {
  switch (a.n) {
    case 1: return launch<T, 1, E>(a, stream);
    case 2: return launch<T, 2, E>(a, stream);
    case 3: return launch<T, 3, E>(a, stream);
    case 4: return launch<T, 4, E>(a, stream);
    case 5: return launch<T, 5, E>(a, stream);
    case 6: return launch<T, 6, E>(a, stream);
    case 7: return launch<T, 7, E>(a, stream);
    case 8: return launch<T, 8, E>(a, stream);
  }
  return cudaErrorInvalidValue;  // unreachable: gemv_supported checked n
}

template <typename T>
cudaError_t launch_epilogue(const GemvArgs& a, cudaStream_t stream) {
  switch (a.epilogue) {
    case GemvEpilogue::None: return launch_n<T, GemvEpilogue::None>(a, stream);
    case GemvEpilogue::Act: return launch_n<T, GemvEpilogue::Act>(a, stream);
    case GemvEpilogue::GatedAct: return launch_n<T, GemvEpilogue::GatedAct>(a, stream);
  }
  return cudaErrorInvalidValue;
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

const char* gemv_unsupported_reason(const GemvArgs& a) {
  if (a.dtype != DType::F16 && a.dtype != DType::BF16 && a.dtype != DType::F32) return "dtype is not f16, bf16 or f32";
  if (a.out_dtype != a.dtype && a.out_dtype != DType::F32) return "out_dtype is neither dtype nor f32";
  if (a.n < 1 || a.n > kGemvMaxTokens) return "n is outside 1..kGemvMaxTokens (8)";
  if (a.out < 1 || a.out > (1 << 30)) return "out is outside 1..2^30";
  const int vec = a.dtype == DType::F32 ? 4 : 8;
  if (a.in < 1 || a.in % vec != 0) return "in is not a positive multiple of the vector width (8 for f16/bf16, 4 for f32)";
  if (!a.x || !a.w || !a.y) return "x, w or y is null";
  if (!aligned16(a.x) || !aligned16(a.w)) return "x or w is not 16-byte aligned";
  if (a.x2 || a.w2 || a.in2) {
    if (a.epilogue != GemvEpilogue::None) return "a second input segment (x2) needs the None epilogue";
    if (!a.x2 || !a.w2 || a.in2 < 1 || a.in2 % vec != 0) return "x2 / w2 / in2 incomplete or in2 not a multiple of the vector width";
    if (!aligned16(a.x2) || !aligned16(a.w2)) return "x2 or w2 is not 16-byte aligned";
  }
  if (a.epilogue != GemvEpilogue::None && a.beta != 0.f) return "beta != 0 with an activation epilogue";
  return nullptr;
}

bool gemv_supported(const GemvArgs& a) { return gemv_unsupported_reason(a) == nullptr; }

void gemv(const GemvArgs& a, cudaStream_t stream) {
  if (const char* why = gemv_unsupported_reason(a))
    throw Error(std::string("kernels/gemv: unsupported arguments: ") + why + " (n=" + std::to_string(a.n) +
                    " out=" + std::to_string(a.out) + " in=" + std::to_string(a.in) + " " + dtype_name(a.dtype) +
                    "->" + dtype_name(a.out_dtype) + ")",
                "check gemv_supported() first and fall back to Gemm::linear + bias_add / activation");
  cudaError_t e = cudaErrorInvalidValue;
  TPS_DISPATCH_DTYPE(a.dtype, T, e = launch_epilogue<T>(a, stream));
  if (e != cudaSuccess)
    throw Error(std::string("kernels/gemv: launch failed: ") + cudaGetErrorString(e) + " (n=" + std::to_string(a.n) +
                    " out=" + std::to_string(a.out) + " in=" + std::to_string(a.in) + ")",
                "run with CUDA_LAUNCH_BLOCKING=1 (and compute-sanitizer) to find the faulting kernel");
}

}  // namespace tpshard::cuda

namespace tpshard::cuda {

const char* gemv_pair_unsupported_reason(const GemvArgs& a0, const GemvArgs& a1) {
  if (const char* why = gemv_unsupported_reason(a0)) return why;
  if (const char* why = gemv_unsupported_reason(a1)) return why;
  if (a0.epilogue != GemvEpilogue::None || a1.epilogue != GemvEpilogue::Act)
    return "the pair takes a None product and an Act product";
  if (a0.dtype != a1.dtype || a0.n != a1.n) return "the two products differ in dtype or n";
  if (a0.n > 2) return "the pair is built for n <= 2";
  if (a0.x2 || a1.x2) return "the pair takes one input segment per product";
  return nullptr;
}

void gemv_pair(const GemvArgs& a0, const GemvArgs& a1, cudaStream_t stream) {
  if (const char* why = gemv_pair_unsupported_reason(a0, a1))
    throw Error(std::string("kernels/gemv_pair: unsupported arguments: ") + why,
                "check gemv_pair_unsupported_reason() first and launch the two products separately");
  cudaError_t e = cudaErrorInvalidValue;
  TPS_DISPATCH_DTYPE(a0.dtype, T, e = a0.n == 1 ? launch_pair<T, 1>(a0, a1, stream) : launch_pair<T, 2>(a0, a1, stream));
  if (e != cudaSuccess)
    throw Error(std::string("kernels/gemv_pair: launch failed: ") + cudaGetErrorString(e),
                "run with CUDA_LAUNCH_BLOCKING=1 (and compute-sanitizer) to find the faulting kernel");
}

}  // namespace tpshard::cuda
