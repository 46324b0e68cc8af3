// gemm.cuh: the linear layers' matrix product through cuBLASLt: Y[n, out] = X[n, in] W[out, in]^T
// (+ beta * Y), W row-major as stored in shard files (model/tensor_names.h). fp16/bf16 inputs with
// fp32 accumulation (CUBLAS_COMPUTE_32F), or fp32 throughout. Owns the cuBLASLt handle, its workspace
// and a cache of the chosen algorithm per shape.
#pragma once
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <map>
#include <tuple>

#include "format/dtype.h"

namespace tpshard::cuda {

struct GemmArgs {
  const void* x = nullptr;  ///< [n, in] row-major of in_dtype, device
  const void* w = nullptr;  ///< [out, in] row-major of in_dtype, device
  void* y = nullptr;        ///< [n, out] row-major of out_dtype, device
  int n = 0;
  int out = 0;
  int in = 0;
  DType in_dtype = DType::F16;
  DType out_dtype = DType::F16;  ///< in_dtype, or F32 (logits)
  float beta = 0.f;              ///< 1: accumulate into y (GPT-NeoX parallel residual)
};

/// One per stream user. Not thread-safe. Capturable in CUDA graphs once a shape has run eagerly
/// (the first call of a shape queries the heuristic, which must not happen during capture).
class Gemm {
 public:
  explicit Gemm(size_t workspace_bytes = 32u << 20);
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  /// Enqueue Y = X W^T + beta Y on stream. Throws Error naming the shape when cuBLASLt has no algorithm.
  void linear(const GemmArgs& a, cudaStream_t stream);

 private:
  struct Plan;
  using Key = std::tuple<int, int, int, int, int, bool>;
  Plan& plan_for(const GemmArgs& a);
  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  std::map<Key, Plan*> plans_;
};

}  // namespace tpshard::cuda
