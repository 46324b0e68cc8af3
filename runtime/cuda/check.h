// check.h: the CUDA, NCCL and cuBLAS(Lt) check macros of the CUDA backend.
// Owns: TPS_CUDA_CHECK, TPS_NCCL_CHECK, TPS_CUBLAS_CHECK, TPS_CUDA_LAUNCH_CHECK and the rank identity
// they print (tp_rank, hostname, device). Each failure throws tpshard::Error whose one-line message
// carries the call text, file:line, tp_rank, hostname, device and the library's error string.
// Does not own: zstd / file I/O errors (format/), the process-wide failure handling (cuda_session).
#pragma once
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <nccl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "format/error.h"
#include "runtime/tuning.h"

namespace tpshard::cuda {

/// This process's tp_rank for error messages; -1 until the worker knows it (cuda_session sets it).
inline int& check_tp_rank() {
  static int rank = -1;
  return rank;
}

/// "tp_rank 1, host gpu7, device 1" (device from cudaGetDevice; no CUDA error is raised here).
inline std::string check_where() {
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  int dev = -1;
  if (cudaGetDevice(&dev) != cudaSuccess) {
    dev = -1;
    (void)cudaGetLastError();
  }
  return "tp_rank " + std::to_string(check_tp_rank()) + ", host " + host + ", device " + std::to_string(dev);
}

/// Builds the Error thrown by the macros below. `hint` names the usual cause when we know it.
inline ::tpshard::Error check_error(const char* lib, const char* call, const char* file, int line,
                                    const std::string& detail, std::string hint) {
  return ::tpshard::Error(std::string(lib) + " error: " + call + " failed at " + file + ":" + std::to_string(line) +
                              " (" + check_where() + "): " + detail,
                          std::move(hint));
}

inline std::string cuda_hint(cudaError_t e) {
  switch (e) {
    case cudaErrorMemoryAllocation:
      return "not enough device memory: lower --max-batch / --max-seq-len or use a larger --tp";
    case cudaErrorNoDevice:
    case cudaErrorInvalidDevice:
      return "check CUDA_VISIBLE_DEVICES and that --tp / nodes does not exceed the GPUs of this node";
    case cudaErrorInsufficientDriver:
      return "the NVIDIA driver is older than this build's CUDA runtime; update the driver";
    default:
      return "rerun with CUDA_LAUNCH_BLOCKING=1 to find the failing kernel";
  }
}

}  // namespace tpshard::cuda

/// TPS_CUDA_CHECK(cudaMalloc(&p, n)): throw Error on any status other than cudaSuccess.
#define TPS_CUDA_CHECK(call)                                                                            \
  do {                                                                                                  \
    cudaError_t tps_err_ = (call);                                                                      \
    if (tps_err_ != cudaSuccess)                                                                        \
      throw ::tpshard::cuda::check_error("CUDA", #call, __FILE__, __LINE__,                             \
                                         std::string(cudaGetErrorName(tps_err_)) + ": " +               \
                                             cudaGetErrorString(tps_err_),                              \
                                         ::tpshard::cuda::cuda_hint(tps_err_));                         \
  } while (0)

/// TPS_NCCL_CHECK(ncclAllReduce(...)): ncclInProgress counts as success (non-blocking communicators);
/// the message adds ncclGetLastError's detail.
#define TPS_NCCL_CHECK(call)                                                                            \
  do {                                                                                                  \
    ncclResult_t tps_res_ = (call);                                                                     \
    if (tps_res_ != ncclSuccess && tps_res_ != ncclInProgress)                                          \
      throw ::tpshard::cuda::check_error("NCCL", #call, __FILE__, __LINE__,                             \
                                         std::string(ncclGetErrorString(tps_res_)) + " (" +             \
                                             ncclGetLastError(nullptr) + ")",                           \
                                         "set NCCL_DEBUG=WARN for details; a peer rank may have failed"); \
  } while (0)

/// TPS_CUBLAS_CHECK(cublasLtMatmul(...)).
#define TPS_CUBLAS_CHECK(call)                                                                          \
  do {                                                                                                  \
    cublasStatus_t tps_st_ = (call);                                                                    \
    if (tps_st_ != CUBLAS_STATUS_SUCCESS)                                                               \
      throw ::tpshard::cuda::check_error("cuBLAS", #call, __FILE__, __LINE__,                           \
                                         std::string("status ") + std::to_string(int(tps_st_)),         \
                                         "check matrix shapes, dtypes and leading dimensions");         \
  } while (0)

/// After a kernel launch: cheap launch-error check; with TPSHARD_SYNC_CHECK=1 in the environment it also
/// synchronizes so an asynchronous fault points at this launch (TensorRT-LLM's sync_check_cuda_error idea).
#define TPS_CUDA_LAUNCH_CHECK(what)                                                                     \
  do {                                                                                                  \
    TPS_CUDA_CHECK(cudaGetLastError());                                                                 \
    static const bool tps_sync_ = ::tpshard::tuning().sync_check;                                       \
    if (tps_sync_) {                                                                                    \
      cudaError_t tps_e2_ = cudaDeviceSynchronize();                                                    \
      if (tps_e2_ != cudaSuccess)                                                                       \
        throw ::tpshard::cuda::check_error("CUDA", what, __FILE__, __LINE__, cudaGetErrorString(tps_e2_), \
                                           "this kernel faulted (found with TPSHARD_SYNC_CHECK=1)");    \
    }                                                                                                   \
  } while (0)
