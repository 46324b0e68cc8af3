// collective_test_util.h: what the collective tests (test_custom_all_reduce.cpp, test_peer_comm.cpp) share:
// failures gathered on rank threads, rank-dependent inputs stored in a dtype, the documented all_reduce
// result (fp32 sum in rank order, rounded once), device buffers and copies.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "format/dtype.h"

namespace tpshard::test {

/// Failures found on rank threads; reported by the main thread (doctest asserts stay on one thread).
struct Failures {
  std::mutex mu;
  std::vector<std::string> list;
  void add(const std::string& s);
  void report();  ///< FAIL_CHECK each (at most 40 kept), then CHECK that there were none
};

/// True when the first n GPUs can all access each other (cudaDeviceCanAccessPeer both ways).
bool all_peers(int n);

/// Rank counts to test: 2, 3, 4 and every GPU (at most 8), as far as there are GPUs; with peers_only,
/// only counts whose GPUs are all CUDA peers (all_peers).
std::vector<int> rank_counts(bool peers_only);

/// Kernels must not spin forever when a test goes wrong (the library default is 300 s): 30 s unless set.
void short_spin_timeout();

/// Input element i of `rank` for variant `salt`: a value with a non-terminating binary fraction (so the
/// sums round), both signs.
float input_value(size_t i, int rank, int salt);
/// Store f rounded to dtype t at element i of bytes / load element i as fp32.
void store(std::vector<uint8_t>& bytes, size_t i, DType t, float f);
float load(const std::vector<uint8_t>& bytes, size_t i, DType t);
/// count elements of input_value(i, rank, salt) in dtype t.
std::vector<uint8_t> make_input(size_t count, DType t, int rank, int salt);
/// The documented all_reduce result: fp32 sum of the dtype-rounded inputs of ranks 0..n-1 in rank order,
/// rounded once to t.
std::vector<uint8_t> reference_sum(size_t count, DType t, int n, int salt);

/// A cudaMalloc'd buffer of the current device (16 bytes when asked for 0), freed on destruction.
struct DeviceMem {
  void* ptr = nullptr;
  explicit DeviceMem(size_t bytes);
  ~DeviceMem();
  DeviceMem(const DeviceMem&) = delete;
  DeviceMem& operator=(const DeviceMem&) = delete;
  uint8_t* at(size_t offset) const { return static_cast<uint8_t*>(ptr) + offset; }
};

/// Copy bytes from / to the device on stream s (download waits for the stream).
std::vector<uint8_t> download(const void* dev, size_t bytes, cudaStream_t s);
void upload(void* dev, const std::vector<uint8_t>& v, cudaStream_t s);

}  // namespace tpshard::test
