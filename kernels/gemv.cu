// gemv.cu: grids, launches and argument checks of the decode-path GEMV (see gemv.cuh); the per-warp
// row computation is in kernels/gemv_row.cuh. P warps per output row (P = tuning.warps_per_row), W / P
// rows per block of W warps; the weights stream through a per-lane shared-memory FIFO (depth D > 0) or
// register batches (D == 0).
// A FIFO block uses kWarps * D * 512 bytes of dynamic shared memory.
#include "kernels/gemv.cuh"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "kernels/common.cuh"
#include "kernels/gemv_row.cuh"
#include "kernels/pdl.cuh"

namespace tpshard::cuda {
namespace {

using gemv_detail::gemv_row_fifo;
using gemv_detail::gemv_row_registers;
using gemv_detail::gemv_no_row;
using gemv_detail::RowPart;

// Defaults of GemvTuning; what the transformer uses is gemv_tuning_for().
constexpr int kDefaultWarps = 4;
constexpr int kDefaultDepth = 0;

/// The calling warp's share (part p of P) of output row `row` of `a`, by the streaming of depth D.
template <typename T, int N, GemvEpilogue E, int D, int P>
__device__ __forceinline__ void row_by(const GemvArgs& a, int row, int lane, const RowPart& p) {
  if constexpr (D == 0) {
    gemv_row_registers<T, N, E, P>(a, row, lane, p);
  } else {
    extern __shared__ uint4 fifo[];
    gemv_row_fifo<T, N, E, D, P>(a, row, lane, p, fifo + p.warp * D * 32);
  }
}

/// Grid: ceil(out / (warps / P)) blocks of `warps` warps (blockDim.x / 32); warp w -> part w % P of
/// the block's output row w / P.
template <typename T, int N, GemvEpilogue E, int D, int P>
__global__ void __launch_bounds__(256) gemv_kernel(GemvArgs a) {
  const int warp = static_cast<int>(threadIdx.x >> 5);
  if (a.skip_if_zero) {  // the same for the whole grid: every block returns, or none
    griddep_wait();      // the flag is written by a previous kernel
    if (*a.skip_if_zero == 0) return;
  }
  const int row = blockIdx.x * ((blockDim.x >> 5) / P) + warp / P;
  if (row >= a.out) return gemv_no_row<P>();  // writes nothing; other warps of the grid wait for the previous kernel
  row_by<T, N, E, D, P>(a, row, threadIdx.x & 31, RowPart{warp % P, warp});
}

/// Two independent products in one launch: blocks [0, blocks0) compute a0, the rest a1.
struct GemvPairParams {
  GemvArgs a0, a1;
  int blocks0;
};

template <typename T, int N, int D, int P>
__global__ void __launch_bounds__(256) gemv_pair_kernel(GemvPairParams p) {
  const int warp = static_cast<int>(threadIdx.x >> 5), lane = threadIdx.x & 31, rows = (blockDim.x >> 5) / P;
  const RowPart part{warp % P, warp};
  if (static_cast<int>(blockIdx.x) < p.blocks0) {
    const int row = blockIdx.x * rows + warp / P;
    if (row < p.a0.out) row_by<T, N, GemvEpilogue::None, D, P>(p.a0, row, lane, part);
    else gemv_no_row<P>();
  } else {
    const int row = (blockIdx.x - p.blocks0) * rows + warp / P;
    if (row < p.a1.out) row_by<T, N, GemvEpilogue::Act, D, P>(p.a1, row, lane, part);
    else gemv_no_row<P>();
  }
}

/// True when kernels with P > 1 warps per row exist for n tokens and FIFO depth d: the decode buckets
/// of the linear layers (n <= 2, kLinearGemvMaxTokens) with register batches or the depth-4 FIFO.
constexpr bool split_built(int n, int d) { return n <= 2 && (d == 0 || d == 4); }

/// Multiprocessors of the current device (0 when the query fails: auto then picks 1 warp per row,
/// and the launch reports the device error).
int current_sms() {
  int dev = 0, sms = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
    return 0;
  return sms;
}

/// The tuning a launch of n tokens and `rows` output rows uses: `t` with its defaults filled in
/// (warps_per_row: gemv_auto_warps_per_row, at most the block's warps; 1 where split_built is false).
GemvTuning resolve(const GemvTuning& t, int n, int rows) {
  GemvTuning r = t;
  if (r.fifo_depth < 0) r.fifo_depth = kDefaultDepth;
  if (r.warps_per_block == 0) r.warps_per_block = kDefaultWarps;
  if (r.warps_per_row == 0)
    r.warps_per_row = split_built(n, r.fifo_depth)
                          ? std::min(gemv_auto_warps_per_row(rows, current_sms(), r.fifo_depth), r.warps_per_block) : 1;
  return r;
}

/// Dynamic shared memory of a block: every warp's FIFO (D slots of 32 lanes x 16 bytes).
size_t smem_bytes(const GemvTuning& t) { return static_cast<size_t>(t.warps_per_block) * t.fifo_depth * 32 * 16; }

/// Allow a FIFO kernel the largest dynamic shared memory a tuning asks for (8 warps x depth 16) and
/// prefer shared memory over L1 (the FIFO blocks are limited by it; L1 only holds x).
template <typename K>
cudaError_t configure_fifo(K* kernel) {
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 8 * 16 * 32 * 16);
  if (e == cudaSuccess)
    e = cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared);
  return e;
}

template <typename T, int N, GemvEpilogue E, int D, int P>
cudaError_t launch_p(const GemvArgs& a, const GemvTuning& t, cudaStream_t stream) {
  static const cudaError_t configured = D > 0 ? configure_fifo(gemv_kernel<T, N, E, D, P>) : cudaSuccess;
  if (configured != cudaSuccess) return configured;
  const int rows = t.warps_per_block / P;  // per block
  const unsigned blocks = static_cast<unsigned>((a.out + rows - 1) / rows);
  return launch_pdl(gemv_kernel<T, N, E, D, P>, dim3(blocks), dim3(t.warps_per_block * 32), smem_bytes(t), stream, a);
}

template <typename T, int N, GemvEpilogue E, int D>
cudaError_t launch(const GemvArgs& a, const GemvTuning& t, cudaStream_t stream) {
  if constexpr (split_built(N, D)) {
    if (t.warps_per_row == 2) return launch_p<T, N, E, D, 2>(a, t, stream);
    if (t.warps_per_row == 4) return launch_p<T, N, E, D, 4>(a, t, stream);
  }
  return launch_p<T, N, E, D, 1>(a, t, stream);  // gemv_supported: warps_per_row is 1 here
}

template <typename T, int N, int D, int P>
cudaError_t launch_pair_p(const GemvArgs& a0, const GemvArgs& a1, const GemvTuning& t, cudaStream_t stream) {
  static const cudaError_t configured = D > 0 ? configure_fifo(gemv_pair_kernel<T, N, D, P>) : cudaSuccess;
  if (configured != cudaSuccess) return configured;
  const int rows = t.warps_per_block / P;  // per block
  GemvPairParams p{a0, a1, (a0.out + rows - 1) / rows};
  const unsigned blocks = static_cast<unsigned>(p.blocks0 + (a1.out + rows - 1) / rows);
  return launch_pdl(gemv_pair_kernel<T, N, D, P>, dim3(blocks), dim3(t.warps_per_block * 32), smem_bytes(t), stream, p);
}

template <typename T, int N, int D>
cudaError_t launch_pair(const GemvArgs& a0, const GemvArgs& a1, const GemvTuning& t, cudaStream_t stream) {
  if constexpr (split_built(N, D)) {
    if (t.warps_per_row == 2) return launch_pair_p<T, N, D, 2>(a0, a1, t, stream);
    if (t.warps_per_row == 4) return launch_pair_p<T, N, D, 4>(a0, a1, t, stream);
  }
  return launch_pair_p<T, N, D, 1>(a0, a1, t, stream);
}

template <typename T, GemvEpilogue E, int D>
cudaError_t launch_n(const GemvArgs& a, const GemvTuning& t, cudaStream_t stream) {
  switch (a.n) {
    case 1: return launch<T, 1, E, D>(a, t, stream);
    case 2: return launch<T, 2, E, D>(a, t, stream);
    case 3: return launch<T, 3, E, D>(a, t, stream);
    case 4: return launch<T, 4, E, D>(a, t, stream);
    case 5: return launch<T, 5, E, D>(a, t, stream);
    case 6: return launch<T, 6, E, D>(a, t, stream);
    case 7: return launch<T, 7, E, D>(a, t, stream);
    case 8: return launch<T, 8, E, D>(a, t, stream);
  }
  return cudaErrorInvalidValue;  // unreachable: gemv_supported checked n
}

template <typename T, int D>
cudaError_t launch_epilogue(const GemvArgs& a, const GemvTuning& t, cudaStream_t stream) {
  switch (a.epilogue) {
    case GemvEpilogue::None: return launch_n<T, GemvEpilogue::None, D>(a, t, stream);
    case GemvEpilogue::Act: return launch_n<T, GemvEpilogue::Act, D>(a, t, stream);
    case GemvEpilogue::GatedAct: return launch_n<T, GemvEpilogue::GatedAct, D>(a, t, stream);
  }
  return cudaErrorInvalidValue;
}

template <typename T>
cudaError_t launch_depth(const GemvArgs& a, const GemvTuning& t, cudaStream_t stream) {
  switch (t.fifo_depth) {
    case 0: return launch_epilogue<T, 0>(a, t, stream);
    case 4: return launch_epilogue<T, 4>(a, t, stream);
    case 8: return launch_epilogue<T, 8>(a, t, stream);
    case 16: return launch_epilogue<T, 16>(a, t, stream);
  }
  return cudaErrorInvalidValue;  // unreachable: gemv_supported checked the tuning
}

template <typename T>
cudaError_t launch_pair_depth(const GemvArgs& a0, const GemvArgs& a1, const GemvTuning& t, cudaStream_t stream) {
  const bool one = a0.n == 1;
  switch (t.fifo_depth) {
    case 0: return one ? launch_pair<T, 1, 0>(a0, a1, t, stream) : launch_pair<T, 2, 0>(a0, a1, t, stream);
    case 4: return one ? launch_pair<T, 1, 4>(a0, a1, t, stream) : launch_pair<T, 2, 4>(a0, a1, t, stream);
    case 8: return one ? launch_pair<T, 1, 8>(a0, a1, t, stream) : launch_pair<T, 2, 8>(a0, a1, t, stream);
    case 16: return one ? launch_pair<T, 1, 16>(a0, a1, t, stream) : launch_pair<T, 2, 16>(a0, a1, t, stream);
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
  if (a.x2_early && !a.x2) return "x2_early without a second input segment (x2)";
  const int d = a.tuning.fifo_depth, w = a.tuning.warps_per_block, p = a.tuning.warps_per_row;
  if (d != -1 && d != 0 && d != 4 && d != 8 && d != 16) return "tuning.fifo_depth is not -1, 0, 4, 8 or 16";
  if (w != 0 && w != 2 && w != 4 && w != 8) return "tuning.warps_per_block is not 0, 2, 4 or 8";
  if (p != 0 && p != 1 && p != 2 && p != 4) return "tuning.warps_per_row is not 0, 1, 2 or 4";
  if (p > (w ? w : kDefaultWarps)) return "tuning.warps_per_row is larger than the block's warps";
  if (p > 1 && !split_built(a.n, d < 0 ? kDefaultDepth : d))
    return "tuning.warps_per_row 2 or 4 needs n <= 2 and fifo_depth 0 or 4";
  return nullptr;
}

bool gemv_supported(const GemvArgs& a) { return gemv_unsupported_reason(a) == nullptr; }

int gemv_auto_warps_per_row(int rows, int sms, int fifo_depth) {
  for (int p = fifo_depth == 0 ? 2 : 1; p < 4; p *= 2)
    if (static_cast<int64_t>(rows) * p >= static_cast<int64_t>(kGemvTargetWarpsPerSm) * sms) return p;
  return 4;
}

GemvTuning gemv_tuning_for(int tp_size) {
  GemvTuning t;
  t.fifo_depth = tp_size > 1 ? 4 : 0;  // the FIFO at tp > 1, register batches at tp 1
  t.warps_per_block = 4;
  t.warps_per_row = 0;  // auto (gemv_auto_warps_per_row)
  return t;
}

void gemv(const GemvArgs& a, cudaStream_t stream) {
  if (const char* why = gemv_unsupported_reason(a))
    throw Error(std::string("kernels/gemv: unsupported arguments: ") + why + " (n=" + std::to_string(a.n) +
                    " out=" + std::to_string(a.out) + " in=" + std::to_string(a.in) + " " + dtype_name(a.dtype) +
                    "->" + dtype_name(a.out_dtype) + ")",
                "check gemv_supported() first and fall back to Gemm::linear + bias_add / activation");
  const GemvTuning t = resolve(a.tuning, a.n, a.out);
  cudaError_t e = cudaErrorInvalidValue;
  TPS_DISPATCH_DTYPE(a.dtype, T, e = launch_depth<T>(a, t, stream));
  if (e != cudaSuccess)
    throw Error(std::string("kernels/gemv: launch failed: ") + cudaGetErrorString(e) + " (n=" + std::to_string(a.n) +
                    " out=" + std::to_string(a.out) + " in=" + std::to_string(a.in) + ")",
                "run with CUDA_LAUNCH_BLOCKING=1 (and compute-sanitizer) to find the faulting kernel");
}

const char* gemv_pair_unsupported_reason(const GemvArgs& a0, const GemvArgs& a1) {
  if (const char* why = gemv_unsupported_reason(a0)) return why;
  if (const char* why = gemv_unsupported_reason(a1)) return why;
  if (a0.epilogue != GemvEpilogue::None || a1.epilogue != GemvEpilogue::Act)
    return "the pair takes a None product and an Act product";
  if (a0.dtype != a1.dtype || a0.n != a1.n) return "the two products differ in dtype or n";
  if (a0.n > 2) return "the pair is built for n <= 2";
  if (a0.skip_if_zero || a1.skip_if_zero) return "skip_if_zero is for gemv() only";
  if (a0.x2 || a1.x2) return "the pair takes one input segment per product";
  return nullptr;
}

void gemv_pair(const GemvArgs& a0, const GemvArgs& a1, cudaStream_t stream) {
  if (const char* why = gemv_pair_unsupported_reason(a0, a1))
    throw Error(std::string("kernels/gemv_pair: unsupported arguments: ") + why,
                "check gemv_pair_unsupported_reason() first and launch the two products separately");
  const GemvTuning t = resolve(a0.tuning, a0.n, a0.out + a1.out);
  cudaError_t e = cudaErrorInvalidValue;
  TPS_DISPATCH_DTYPE(a0.dtype, T, e = launch_pair_depth<T>(a0, a1, t, stream));
  if (e != cudaSuccess)
    throw Error(std::string("kernels/gemv_pair: launch failed: ") + cudaGetErrorString(e),
                "run with CUDA_LAUNCH_BLOCKING=1 (and compute-sanitizer) to find the faulting kernel");
}

}  // namespace tpshard::cuda
