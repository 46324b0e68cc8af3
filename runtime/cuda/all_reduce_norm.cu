// all_reduce_norm.cu: CustomAllReduce::all_reduce_add_norm (custom_all_reduce.h): the all_reduce of a
// row-parallel layer's partial sums fused with the residual add and norm that follow it (one kernel
// instead of two per all_reduce at decode). Same flag protocol as the one-shot all_reduce
// (custom_all_reduce_protocol.cuh), but each block owns whole ROWS (rows b, b + kBlocks, ...) so that it can
// normalize them; the sum is rounded once to the activation dtype before it is added, exactly as the
// unfused all_reduce_sum + add_norm pair does. The fusion of the all-reduce with the residual add and
// RMSNorm is the technique of TensorRT-LLM's fused allreduce kernels (read to learn; own implementation).
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

template <typename T, int kRanks, bool kLayerNorm>
__global__ void __launch_bounds__(kThreads) all_reduce_add_norm_kernel(FusedParams p) {
  constexpr int kElems = 16 / sizeof(T);
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

  for (int row = b; row < a.n; row += kBlocks) {
    float v[kMaxPacksPerThread][kElems];
    float* const x = a.residual + static_cast<int64_t>(row) * a.hidden;
    float s = 0.f;
#pragma unroll
    for (int k = 0; k < kMaxPacksPerThread; ++k) {
      const int i = threadIdx.x + k * kThreads;
      if (i >= p.row_packs) continue;
      uint4 pk[kRanks];
#pragma unroll
      for (int r = 0; r < kRanks; ++r)
        pk[r] = __ldcg(reinterpret_cast<const uint4*>(staging(p.g, r, epoch)) + static_cast<int64_t>(row) * p.row_packs + i);
      const uint4 sum = sum_packs<T, kRanks>(pk);  // the all_reduce's bits: fp32 in rank order, rounded once
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
}

template <typename T, bool kLayerNorm>
cudaError_t launch_fused(int tp_size, const FusedParams& p, cudaStream_t stream) {
  const dim3 grid(kBlocks), block(kThreads);
  switch (tp_size) {
    case 2: return launch_pdl(all_reduce_add_norm_kernel<T, 2, kLayerNorm>, grid, block, 0, stream, p);
    case 3: return launch_pdl(all_reduce_add_norm_kernel<T, 3, kLayerNorm>, grid, block, 0, stream, p);
    case 4: return launch_pdl(all_reduce_add_norm_kernel<T, 4, kLayerNorm>, grid, block, 0, stream, p);
    case 5: return launch_pdl(all_reduce_add_norm_kernel<T, 5, kLayerNorm>, grid, block, 0, stream, p);
    case 6: return launch_pdl(all_reduce_add_norm_kernel<T, 6, kLayerNorm>, grid, block, 0, stream, p);
    case 7: return launch_pdl(all_reduce_add_norm_kernel<T, 7, kLayerNorm>, grid, block, 0, stream, p);
    case 8: return launch_pdl(all_reduce_add_norm_kernel<T, 8, kLayerNorm>, grid, block, 0, stream, p);
  }
  return cudaErrorInvalidValue;
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

bool CustomAllReduce::add_norm_eligible(const AddNormParams& a) const {
  if (region_ == nullptr || a.n <= 0 || a.hidden <= 0 || !a.add0 || !a.residual || !a.weight0 || !a.out0) return false;
  if (a.dtype != DType::F32 && a.dtype != DType::F16 && a.dtype != DType::BF16) return false;
  const size_t row_bytes = static_cast<size_t>(a.hidden) * dtype_size(a.dtype);
  if (row_bytes % 16 != 0 || a.hidden % 4 != 0) return false;
  if (row_bytes / 16 > static_cast<size_t>(kMaxPacksPerThread) * kThreads) return false;
  if (static_cast<size_t>(a.n) * row_bytes > max_bytes_) return false;
  return aligned16(a.add0) && aligned16(a.residual) && aligned16(a.out0) && (!a.out1 || aligned16(a.out1));
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
  cudaError_t e = cudaSuccess;
  if (a.kind == NormKind::LayerNorm) {
    TPS_DISPATCH_DTYPE(a.dtype, T, e = (launch_fused<T, true>(size_, p, stream)));
  } else {
    TPS_DISPATCH_DTYPE(a.dtype, T, e = (launch_fused<T, false>(size_, p, stream)));
  }
  TPS_CUDA_CHECK(e);
}

}  // namespace tpshard::cuda
