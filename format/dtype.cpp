// dtype.cpp: element sizes/names and exact fp32 <-> fp16/bf16 conversions (round to nearest even).
// Owns: the bit-level conversions used by the converter and by ShardReader::read_tensor_f32.
#include "format/dtype.h"

#include <cmath>
#include <cstring>

#include "format/error.h"

namespace tpshard {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32: return 4;
    case DType::F16: return 2;
    case DType::BF16: return 2;
  }
  throw Error("dtype_size: unknown dtype value " + std::to_string(static_cast<int>(t)), "");
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "f32";
    case DType::F16: return "f16";
    case DType::BF16: return "bf16";
  }
  return "unknown";
}

DType dtype_from_string(const std::string& s) {
  if (s == "f32" || s == "float32" || s == "fp32" || s == "F32" || s == "torch.float32") return DType::F32;
  if (s == "f16" || s == "float16" || s == "fp16" || s == "F16" || s == "torch.float16") return DType::F16;
  if (s == "bf16" || s == "bfloat16" || s == "BF16" || s == "torch.bfloat16") return DType::BF16;
  throw Error("unknown dtype '" + s + "'", "use one of f32, f16, bf16 (float32, float16, bfloat16)");
}

static uint32_t f32_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
static float bits_f32(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

float bf16_to_f32(uint16_t b) { return bits_f32(static_cast<uint32_t>(b) << 16); }

float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) return bits_f32(sign | 0x7f800000u | (mant << 13));  // inf / nan (payload kept)
  if (exp != 0) return bits_f32(sign | ((exp + 112u) << 23) | (mant << 13));
  if (mant == 0) return bits_f32(sign);
  // Subnormal: value = mant * 2^-24, exact in f32.
  const float v = static_cast<float>(mant) * 5.9604644775390625e-8f;
  return sign ? -v : v;
}

uint16_t f32_to_bf16(float f) {
  const uint32_t u = f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);  // quiet NaN
  const uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);  // ties to even
  return static_cast<uint16_t>((u + rounding) >> 16);
}

uint16_t f32_to_f16(float f) {
  const uint32_t u = f32_bits(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u | ((abs >> 13) & 0x3ffu));  // NaN
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520 rounds to inf
  const int32_t exp = static_cast<int32_t>(abs >> 23) - 127;
  if (exp >= -14) {
    // Normal f16: keep 10 mantissa bits, round the 13 dropped bits to nearest even.
    const uint32_t mant = abs & 0x7fffffu;
    uint32_t h = (static_cast<uint32_t>(exp + 15) << 10) | (mant >> 13);
    const uint32_t rest = mant & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;  // carry may bump the exponent: correct
    return static_cast<uint16_t>(sign | h);
  }
  if (exp < -25) return sign;  // below half the smallest subnormal: rounds to zero
  // Subnormal f16: value / 2^-24 rounded to nearest even integer.
  const uint32_t mant = (abs & 0x7fffffu) | 0x800000u;  // 24-bit significand, value = mant * 2^(exp-23)
  const int shift = -exp - 1;  // bits to drop so that the unit is 2^-24: (exp - 23) - (-24) = exp + 1 < 0
  uint32_t h = mant >> shift;
  const uint32_t rest = mant & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1);
  if (rest > half || (rest == half && (h & 1u))) ++h;
  return static_cast<uint16_t>(sign | h);
}

namespace {

template <typename Load, typename Store>
void convert_loop(const uint8_t* src, size_t src_size, uint8_t* dst, size_t dst_size, size_t n, Load load,
                  Store store, bool check, const std::string& what, const char* to_name) {
  for (size_t i = 0; i < n; ++i) {
    const float v = load(src + i * src_size);
    const bool ok = store(dst + i * dst_size, v);
    if (check && !ok) {
      throw Error(what + ": element " + std::to_string(i) + " = " + std::to_string(v) + " overflows " + to_name,
                  "keep the source dtype (--dtype keep) or convert to f32/bf16, which have the range of f32");
    }
  }
}

}  // namespace

void convert_elements(const void* src_v, DType from, void* dst_v, DType to, size_t n, const std::string& what) {
  const auto* src = static_cast<const uint8_t*>(src_v);
  auto* dst = static_cast<uint8_t*>(dst_v);
  if (from == to) {
    std::memcpy(dst, src, n * dtype_size(from));
    return;
  }
  auto load = [from](const uint8_t* p) -> float {
    if (from == DType::F32) {
      float f;
      std::memcpy(&f, p, 4);
      return f;
    }
    uint16_t h;
    std::memcpy(&h, p, 2);
    return from == DType::F16 ? f16_to_f32(h) : bf16_to_f32(h);
  };
  auto store = [to](uint8_t* p, float v) -> bool {
    if (to == DType::F32) {
      std::memcpy(p, &v, 4);
      return true;
    }
    const uint16_t h = to == DType::F16 ? f32_to_f16(v) : f32_to_bf16(v);
    std::memcpy(p, &h, 2);
    // Finite in, infinite out: the value is outside the destination's range.
    const float back = to == DType::F16 ? f16_to_f32(h) : bf16_to_f32(h);
    return !(std::isfinite(v) && std::isinf(back));
  };
  convert_loop(src, dtype_size(from), dst, dtype_size(to), n, load, store, true, what, dtype_name(to));
}

uint64_t count_nonfinite(const void* src_v, DType t, size_t n, uint64_t* nan_count) {
  const auto* src = static_cast<const uint8_t*>(src_v);
  uint64_t bad = 0, nans = 0;
  if (t == DType::F32) {
    for (size_t i = 0; i < n; ++i) {
      uint32_t b;
      std::memcpy(&b, src + 4 * i, 4);
      if ((b & 0x7f800000u) == 0x7f800000u) {
        ++bad;
        nans += (b & 0x007fffffu) != 0;
      }
    }
  } else {
    // f16: 5 exponent bits 0x7c00, 10 mantissa bits; bf16: 8 exponent bits 0x7f80, 7 mantissa bits.
    const uint16_t exp = t == DType::F16 ? 0x7c00 : 0x7f80;
    const uint16_t man = t == DType::F16 ? 0x03ff : 0x007f;
    for (size_t i = 0; i < n; ++i) {
      uint16_t h;
      std::memcpy(&h, src + 2 * i, 2);
      if ((h & exp) == exp) {
        ++bad;
        nans += (h & man) != 0;
      }
    }
  }
  if (nan_count) *nan_count = nans;
  return bad;
}

}  // namespace tpshard
