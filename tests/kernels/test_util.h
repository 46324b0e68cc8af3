// test_util.h: helpers of the kernel tests: device buffers, dtype rounding/upload/download, random
// inputs, and the one tolerance check (element-wise |gpu - ref| <= atol + rtol |ref| for EVERY element,
// plus a whole-tensor relative RMS bound), which prints the worst elements when it fails.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "format/dtype.h"

namespace tpshard::test {

using Vec = std::vector<double>;

/// Owning device allocation (zeroed).
struct DeviceBuffer {
  void* ptr = nullptr;
  explicit DeviceBuffer(size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  template <typename T> T* as() const { return static_cast<T*>(ptr); }
};

using Buf = std::unique_ptr<DeviceBuffer>;

/// Round each value to dtype and back (so references see exactly what the GPU sees).
Vec round_to(const Vec& v, DType t);
/// Uniform random values in [lo, hi), rounded to dtype.
Vec random_vec(size_t n, double lo, double hi, DType t, std::mt19937& rng);
/// Upload v converted to dtype into a new buffer / download n elements of dtype.
Buf upload(const Vec& v, DType t);
Buf upload_i32(const std::vector<int32_t>& v);
Vec download(const void* dev, size_t n, DType t);

struct Tolerance {
  double atol;
  double rtol;
  double rms;  ///< bound on sqrt(sum (g-r)^2 / sum r^2)
};
/// Default tolerances for a result stored in dtype after fp32 computation.
Tolerance tol_for(DType t);
/// doctest CHECKs that every element and the whole tensor are within tolerance; `what` names the case.
void check_close(const std::string& what, const Vec& got, const Vec& ref, const Tolerance& tol);

const char* name_of(DType t);

}  // namespace tpshard::test
