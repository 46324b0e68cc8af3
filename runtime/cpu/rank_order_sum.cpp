// rank_order_sum.cpp: see rank_order_sum.h.
#include "runtime/cpu/rank_order_sum.h"

#include <cstdint>
#include <cstring>

namespace tpshard {
namespace {
float load_as_f32(const void* p, size_t i, DType t) {
  switch (t) {
    case DType::F32: return static_cast<const float*>(p)[i];
    case DType::F16: return f16_to_f32(static_cast<const uint16_t*>(p)[i]);
    case DType::BF16: return bf16_to_f32(static_cast<const uint16_t*>(p)[i]);
  }
  return 0.0f;
}
}  // namespace

void sum_in_rank_order(const std::vector<const void*>& parts, size_t count, DType dtype, std::vector<float>* sum) {
  sum->assign(count, 0.0f);
  float* out = sum->data();
  for (const void* src : parts) {
    if (dtype == DType::F32) {
      const float* s = static_cast<const float*>(src);
      for (size_t i = 0; i < count; ++i) out[i] += s[i];
    } else {
      for (size_t i = 0; i < count; ++i) out[i] += load_as_f32(src, i, dtype);
    }
  }
}

void store_sum(const std::vector<float>& sum, void* buf, size_t count, DType dtype) {
  if (dtype == DType::F32) {
    std::memcpy(buf, sum.data(), count * sizeof(float));
  } else {
    convert_elements(sum.data(), DType::F32, buf, dtype, count, "all_reduce_sum result");
  }
}

}  // namespace tpshard
