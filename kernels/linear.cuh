// linear.cuh: one linear layer with its epilogue, choosing the implementation: the decode GEMV
// (gemv.cuh: 1..8 tokens, bias / activation / beta fused) when it applies, else cuBLASLt (gemm.cuh)
// followed by the separate bias_add / activation kernels. The transformer and the kernel benchmark
// both go through here, so what is benchmarked is what runs.
#pragma once
#include <cuda_runtime.h>

#include "kernels/gemm.cuh"
#include "kernels/gemv.cuh"

namespace tpshard::cuda {

/// The largest n for which linear() takes the GEMV: measured on H200 (tools/bench_kernels), the GEMV
/// beats cuBLASLt at 1 token on every decode shape and loses at 4 on most; 2 is close to even.
constexpr int kLinearGemvMaxTokens = 2;

/// y = epilogue(x W^T + bias) (see GemvArgs for shapes and dtypes). The GEMV is used when
/// a.n <= kLinearGemvMaxTokens and gemv_supported(a). `scratch` must hold
/// [n, rows] of a.dtype (rows = 2*out for GatedAct, out for Act) when the cuBLASLt path is taken with
/// an activation; it may be null otherwise. use_gemv false forces the cuBLASLt path. With the cuBLASLt
/// path a bias is only supported with beta == 0 (bias_add runs after the product). Throws Error as
/// Gemm::linear does.
void linear(const GemvArgs& a, Gemm& gemm, void* scratch, bool use_gemv, cudaStream_t stream);

/// The scratch elements linear() needs on the cuBLASLt path: n x (2*out for GatedAct, out for Act, 0 for None).
size_t linear_scratch_elems(const GemvArgs& a);

}  // namespace tpshard::cuda
