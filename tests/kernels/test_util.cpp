// test_util.cpp: helpers of the kernel tests (see test_util.h).
#include "tests/kernels/test_util.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <sstream>

namespace tpshard::test {

DeviceBuffer::DeviceBuffer(size_t bytes) {
  REQUIRE(cudaMalloc(&ptr, bytes == 0 ? 16 : bytes) == cudaSuccess);
  REQUIRE(cudaMemset(ptr, 0, bytes == 0 ? 16 : bytes) == cudaSuccess);
}
DeviceBuffer::~DeviceBuffer() { cudaFree(ptr); }

const char* name_of(DType t) { return t == DType::F32 ? "f32" : (t == DType::F16 ? "f16" : "bf16"); }

static std::vector<uint8_t> encode(const Vec& v, DType t) {
  std::vector<uint8_t> out(v.size() * dtype_size(t));
  for (size_t i = 0; i < v.size(); ++i) {
    const float f = static_cast<float>(v[i]);
    if (t == DType::F32) {
      reinterpret_cast<float*>(out.data())[i] = f;
    } else {
      reinterpret_cast<uint16_t*>(out.data())[i] = t == DType::F16 ? f32_to_f16(f) : f32_to_bf16(f);
    }
  }
  return out;
}

static Vec decode(const uint8_t* p, size_t n, DType t) {
  Vec out(n);
  for (size_t i = 0; i < n; ++i) {
    if (t == DType::F32) out[i] = reinterpret_cast<const float*>(p)[i];
    else if (t == DType::F16) out[i] = f16_to_f32(reinterpret_cast<const uint16_t*>(p)[i]);
    else out[i] = bf16_to_f32(reinterpret_cast<const uint16_t*>(p)[i]);
  }
  return out;
}

Vec round_to(const Vec& v, DType t) {
  std::vector<uint8_t> b = encode(v, t);
  return decode(b.data(), v.size(), t);
}

Vec random_vec(size_t n, double lo, double hi, DType t, std::mt19937& rng) {
  std::uniform_real_distribution<double> d(lo, hi);
  Vec v(n);
  for (double& x : v) x = d(rng);
  return round_to(v, t);
}

Buf upload(const Vec& v, DType t) {
  std::vector<uint8_t> b = encode(v, t);
  auto d = std::make_unique<DeviceBuffer>(b.size());
  REQUIRE(cudaMemcpy(d->ptr, b.data(), b.size(), cudaMemcpyHostToDevice) == cudaSuccess);
  return d;
}

Buf upload_i32(const std::vector<int32_t>& v) {
  auto d = std::make_unique<DeviceBuffer>(v.size() * 4);
  REQUIRE(cudaMemcpy(d->ptr, v.data(), v.size() * 4, cudaMemcpyHostToDevice) == cudaSuccess);
  return d;
}

Vec download(const void* dev, size_t n, DType t) {
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  std::vector<uint8_t> b(n * dtype_size(t));
  REQUIRE(cudaMemcpy(b.data(), dev, b.size(), cudaMemcpyDeviceToHost) == cudaSuccess);
  return decode(b.data(), n, t);
}

Tolerance tol_for(DType t) {
  switch (t) {
    case DType::F32: return {1e-5, 1e-4, 1e-5};
    case DType::F16: return {2e-3, 4e-3, 2e-3};
    case DType::BF16: return {1.6e-2, 1.6e-2, 1e-2};
  }
  return {0, 0, 0};
}

void check_close(const std::string& what, const Vec& got, const Vec& ref, const Tolerance& tol) {
  REQUIRE_MESSAGE(got.size() == ref.size(), what << ": size " << got.size() << " vs reference " << ref.size());
  size_t bad = 0, worst = 0;
  double worst_excess = -1, num = 0, den = 0, max_abs = 0;
  std::ostringstream first;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(got[i] - ref[i]);
    const double allowed = tol.atol + tol.rtol * std::fabs(ref[i]);
    num += err * err;
    den += ref[i] * ref[i];
    max_abs = std::max(max_abs, err);
    if (!(err <= allowed)) {  // NaN fails too
      if (bad < 5) first << " [" << i << "] gpu " << got[i] << " ref " << ref[i] << ";";
      ++bad;
    }
    if (err - allowed > worst_excess) {
      worst_excess = err - allowed;
      worst = i;
    }
  }
  const double rel_rms = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  CHECK_MESSAGE(bad == 0, what << ": " << bad << " of " << got.size() << " elements out of tolerance (atol " << tol.atol
                                << ", rtol " << tol.rtol << "); max abs err " << max_abs << "; first:" << first.str());
  CHECK_MESSAGE(rel_rms <= tol.rms, what << ": relative RMS error " << rel_rms << " > " << tol.rms << " (worst ["
                                         << worst << "] gpu " << got[worst] << " ref " << ref[worst] << ")");
}

}  // namespace tpshard::test
