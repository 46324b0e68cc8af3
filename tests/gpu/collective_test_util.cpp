// collective_test_util.cpp: see collective_test_util.h.
#include "tests/gpu/collective_test_util.h"

#include <doctest/doctest.h>

#include <cstdlib>
#include <cstring>

#include "runtime/cuda/check.h"
#include "runtime/cuda/cuda_session.h"
#include "runtime/cuda/custom_all_reduce.h"

namespace tpshard::test {

void Failures::add(const std::string& s) {
  std::lock_guard<std::mutex> lock(mu);
  if (list.size() < 40) list.push_back(s);
}

void Failures::report() {
  for (const auto& s : list) FAIL_CHECK(s);
  CHECK(list.empty());
}

bool all_peers(int n) {
  for (int a = 0; a < n; ++a)
    for (int b = 0; b < n; ++b) {
      if (a == b) continue;
      int ok = 0;
      if (cudaDeviceCanAccessPeer(&ok, a, b) != cudaSuccess || !ok) {
        (void)cudaGetLastError();
        return false;
      }
    }
  return true;
}

std::vector<int> rank_counts(bool peers_only) {
  const int gpus = cuda::cuda_device_count();
  const int all = gpus > 8 ? 8 : gpus;
  std::vector<int> out;
  for (int n : {2, 3, 4})
    if (n <= gpus && (!peers_only || all_peers(n))) out.push_back(n);
  if (all > 4 && (!peers_only || all_peers(all))) out.push_back(all);
  return out;
}

void short_spin_timeout() { cuda::custom_all_reduce_settings().timeout_s = 30.0; }

float input_value(size_t i, int rank, int salt) {
  const long v = long((i * 7919 + size_t(rank) * 104729 + size_t(salt) * 31337) % 2001) - 1000;
  return float(v) / 37.0f;
}

void store(std::vector<uint8_t>& bytes, size_t i, DType t, float f) {
  if (t == DType::F32) {
    std::memcpy(bytes.data() + 4 * i, &f, 4);
  } else {
    const uint16_t h = t == DType::F16 ? f32_to_f16(f) : f32_to_bf16(f);
    std::memcpy(bytes.data() + 2 * i, &h, 2);
  }
}

float load(const std::vector<uint8_t>& bytes, size_t i, DType t) {
  if (t == DType::F32) {
    float f;
    std::memcpy(&f, bytes.data() + 4 * i, 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, bytes.data() + 2 * i, 2);
  return t == DType::F16 ? f16_to_f32(h) : bf16_to_f32(h);
}

std::vector<uint8_t> make_input(size_t count, DType t, int rank, int salt) {
  std::vector<uint8_t> out(count * dtype_size(t));
  for (size_t i = 0; i < count; ++i) store(out, i, t, input_value(i, rank, salt));
  return out;
}

std::vector<uint8_t> reference_sum(size_t count, DType t, int n, int salt) {
  std::vector<uint8_t> out(count * dtype_size(t));
  std::vector<uint8_t> one(dtype_size(t));
  for (size_t i = 0; i < count; ++i) {
    float acc = 0.0f;
    for (int r = 0; r < n; ++r) {
      store(one, 0, t, input_value(i, r, salt));
      const float x = load(one, 0, t);
      acc = r == 0 ? x : acc + x;
    }
    store(out, i, t, acc);
  }
  return out;
}

DeviceMem::DeviceMem(size_t bytes) { TPS_CUDA_CHECK(cudaMalloc(&ptr, bytes == 0 ? 16 : bytes)); }
DeviceMem::~DeviceMem() { cudaFree(ptr); }

std::vector<uint8_t> download(const void* dev, size_t bytes, cudaStream_t s) {
  std::vector<uint8_t> out(bytes);
  if (bytes) TPS_CUDA_CHECK(cudaMemcpyAsync(out.data(), dev, bytes, cudaMemcpyDeviceToHost, s));
  TPS_CUDA_CHECK(cudaStreamSynchronize(s));
  return out;
}

void upload(void* dev, const std::vector<uint8_t>& v, cudaStream_t s) {
  if (!v.empty()) TPS_CUDA_CHECK(cudaMemcpyAsync(dev, v.data(), v.size(), cudaMemcpyHostToDevice, s));
}

}  // namespace tpshard::test
