// test_nccl_comm.cpp: NcclCommunicator with one rank in this process (multi-rank runs are in
// scripts/gpu_check.sh: tprun comm-test, 2 GPUs and two "nodes"). Checks exact results and that a
// collective on an aborted communicator throws instead of hanging.
#include <doctest/doctest.h>

#include <cstring>
#include <vector>

#include "format/error.h"
#include "runtime/cuda/check.h"
#include "runtime/cuda/nccl_comm.h"

using namespace tpshard;
using tpshard::cuda::NcclCommunicator;

TEST_CASE("NcclCommunicator, one rank: all_reduce / all_gather / broadcast / host gather are exact") {
  TPS_CUDA_CHECK(cudaSetDevice(0));
  ncclUniqueId id;
  TPS_NCCL_CHECK(ncclGetUniqueId(&id));
  NcclCommunicator comm(id, 0, 1, 30.0);
  CHECK(comm.rank() == 0);
  CHECK(comm.size() == 1);
  CHECK(comm.stream() != nullptr);
  const size_t n = 100003;
  std::vector<float> h(n);
  for (size_t i = 0; i < n; ++i) h[i] = float(i % 1000) - 500.0f;
  float* d = nullptr;
  TPS_CUDA_CHECK(cudaMalloc(&d, n * sizeof(float) * 2));
  TPS_CUDA_CHECK(cudaMemcpy(d, h.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  TPS_CUDA_CHECK(cudaDeviceSynchronize());  // a pageable copy may return before its DMA landed
  comm.all_reduce_sum(d, n, DType::F32);
  comm.all_gather(d, d + n, n, DType::F32);
  comm.synchronize();
  std::vector<float> back(2 * n);
  TPS_CUDA_CHECK(cudaMemcpy(back.data(), d, 2 * n * sizeof(float), cudaMemcpyDeviceToHost));
  CHECK(std::memcmp(back.data(), h.data(), n * sizeof(float)) == 0);
  CHECK(std::memcmp(back.data() + n, h.data(), n * sizeof(float)) == 0);
  comm.barrier();
  double x[2] = {1.5, -2.25};
  auto all = comm.all_gather_host(x, sizeof(x));
  REQUIRE(all.size() == sizeof(x));
  CHECK(std::memcmp(all.data(), x, sizeof(x)) == 0);
  TPS_CUDA_CHECK(cudaFree(d));
}

TEST_CASE("NcclCommunicator: after abort, collectives throw (no hang)") {
  TPS_CUDA_CHECK(cudaSetDevice(0));
  ncclUniqueId id;
  TPS_NCCL_CHECK(ncclGetUniqueId(&id));
  NcclCommunicator comm(id, 0, 1, 10.0);
  float* d = nullptr;
  TPS_CUDA_CHECK(cudaMalloc(&d, 16));
  comm.abort();
  CHECK_THROWS_AS(comm.all_reduce_sum(d, 4, DType::F32), Error);
  TPS_CUDA_CHECK(cudaFree(d));
}
