// gemm.cu: cuBLASLt matrix products for the linear layers (see gemm.cuh).
// Row-major Y[n, out] = X[n, in] W[out, in]^T is column-major Y^T[out, n] = op(W)[out, in] X^T[in, n]
// with W read transposed (its column-major view is [in, out], ld = in) and X as is (ld = in).
#include <string>

#include "kernels/common.cuh"
#include "kernels/gemm.cuh"

namespace tpshard::cuda {
namespace {

void check_lt(cublasStatus_t s, const char* call) {
  if (s != CUBLAS_STATUS_SUCCESS)
    throw Error(std::string("kernels/gemm: ") + call + " failed with cuBLAS status " + std::to_string(static_cast<int>(s)),
                "check the CUDA/cuBLAS installation and that the device has free memory");
}

cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::F32: return CUDA_R_32F;
    case DType::F16: return CUDA_R_16F;
    case DType::BF16: return CUDA_R_16BF;
  }
  return CUDA_R_32F;
}

const char* type_name(DType t) { return t == DType::F32 ? "f32" : (t == DType::F16 ? "f16" : "bf16"); }

}  // namespace

struct Gemm::Plan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
};

Gemm::Gemm(size_t workspace_bytes) : workspace_bytes_(workspace_bytes) {
  check_lt(cublasLtCreate(&handle_), "cublasLtCreate");
  if (cudaMalloc(&workspace_, workspace_bytes_) != cudaSuccess)
    throw Error("kernels/gemm: cudaMalloc of the " + std::to_string(workspace_bytes_) + "-byte cuBLASLt workspace failed",
                "free device memory or lower max_batch / max_seq_len");
}

Gemm::~Gemm() {
  for (auto& kv : plans_) {
    cublasLtMatmulDescDestroy(kv.second->op);
    cublasLtMatrixLayoutDestroy(kv.second->a);
    cublasLtMatrixLayoutDestroy(kv.second->b);
    cublasLtMatrixLayoutDestroy(kv.second->c);
    delete kv.second;
  }
  cudaFree(workspace_);
  cublasLtDestroy(handle_);
}

Gemm::Plan& Gemm::plan_for(const GemmArgs& a) {
  const Key key{a.n, a.out, a.in, static_cast<int>(a.in_dtype), static_cast<int>(a.out_dtype), a.beta != 0.f};
  auto it = plans_.find(key);
  if (it != plans_.end()) return *it->second;
  auto* p = new Plan();
  const cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  check_lt(cublasLtMatmulDescCreate(&p->op, compute, CUDA_R_32F), "cublasLtMatmulDescCreate");
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  check_lt(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)), "set TRANSA");
  check_lt(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)), "set TRANSB");
  const cudaDataType_t tin = cuda_type(a.in_dtype), tout = cuda_type(a.out_dtype);
  check_lt(cublasLtMatrixLayoutCreate(&p->a, tin, a.in, a.out, a.in), "layout W");
  check_lt(cublasLtMatrixLayoutCreate(&p->b, tin, a.in, a.n, a.in), "layout X");
  check_lt(cublasLtMatrixLayoutCreate(&p->c, tout, a.out, a.n, a.out), "layout Y");
  cublasLtMatmulPreference_t pref = nullptr;
  check_lt(cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate");
  check_lt(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes_,
                                                sizeof(workspace_bytes_)),
           "set workspace");
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t s = cublasLtMatmulAlgoGetHeuristic(handle_, p->op, p->a, p->b, p->c, p->c, pref, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (s != CUBLAS_STATUS_SUCCESS || found == 0) {
    delete p;
    throw Error("kernels/gemm: cuBLASLt has no algorithm for n=" + std::to_string(a.n) + " out=" + std::to_string(a.out) +
                    " in=" + std::to_string(a.in) + " (" + type_name(a.in_dtype) + " -> " + type_name(a.out_dtype) + ")",
                "use a supported dtype combination (f16/bf16 in with same or f32 out, or f32)");
  }
  p->algo = result.algo;
  plans_[key] = p;
  return *p;
}

void Gemm::linear(const GemmArgs& a, cudaStream_t stream) {
  if (a.n == 0 || a.out == 0) return;
  Plan& p = plan_for(a);
  const float alpha = 1.f, beta = a.beta;
  check_lt(cublasLtMatmul(handle_, p.op, &alpha, a.w, p.a, a.x, p.b, &beta, a.y, p.c, a.y, p.c, &p.algo, workspace_,
                          workspace_bytes_, stream),
           "cublasLtMatmul");
}

}  // namespace tpshard::cuda
