// test_dtype.cpp: fp32 <-> fp16/bf16 conversions against hand-computed bit patterns
// (IEEE 754 binary16 and bfloat16, round to nearest, ties to even).
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "format/dtype.h"
#include "format/error.h"

using namespace tpshard;

static float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

TEST_CASE("f32_to_f16: exact values, rounding ties to even, subnormals, overflow") {
  CHECK(f32_to_f16(1.0f) == 0x3c00);
  CHECK(f32_to_f16(-2.0f) == 0xc000);
  CHECK(f32_to_f16(65504.0f) == 0x7bff);            // largest finite f16
  CHECK(f32_to_f16(65519.0f) == 0x7bff);            // below the midpoint to inf
  CHECK(f32_to_f16(65520.0f) == 0x7c00);            // midpoint rounds to even = inf
  CHECK(f32_to_f16(0.0f) == 0x0000);
  CHECK(f32_to_f16(-0.0f) == 0x8000);
  // 1 + 2^-11 is halfway between 1 and 1 + 2^-10: tie to even -> 1.0
  CHECK(f32_to_f16(1.0f + std::ldexp(1.0f, -11)) == 0x3c00);
  // 1 + 3*2^-11 is halfway between 1+2^-10 (odd) and 1+2^-9 (even) -> 0x3c02
  CHECK(f32_to_f16(1.0f + 3 * std::ldexp(1.0f, -11)) == 0x3c02);
  CHECK(f32_to_f16(1.0f + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -20)) == 0x3c01);  // above the tie
  CHECK(f32_to_f16(std::ldexp(1.0f, -24)) == 0x0001);      // smallest subnormal
  CHECK(f32_to_f16(std::ldexp(1.0f, -25)) == 0x0000);      // tie between 0 and 2^-24: even = 0
  CHECK(f32_to_f16(std::ldexp(1.5f, -25)) == 0x0001);      // above the tie
  CHECK(f32_to_f16(std::ldexp(3.0f, -25)) == 0x0002);      // 1.5 * 2^-24: tie -> even (2)
  CHECK(f32_to_f16(std::ldexp(1.0f, -14)) == 0x0400);      // smallest normal
  CHECK(f32_to_f16(std::ldexp(1023.0f, -24) + std::ldexp(1.0f, -25)) == 0x0400);  // rounds up into normal
  CHECK(f32_to_f16(std::numeric_limits<float>::infinity()) == 0x7c00);
  CHECK((f32_to_f16(std::nanf("")) & 0x7c00) == 0x7c00);
  CHECK((f32_to_f16(std::nanf("")) & 0x03ff) != 0);
}

TEST_CASE("f16_to_f32 is exact for all 65536 patterns and inverts f32_to_f16") {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = f16_to_f32(static_cast<uint16_t>(h));
    if (std::isnan(f)) {
      CHECK((h & 0x7c00) == 0x7c00);
      continue;
    }
    REQUIRE(f32_to_f16(f) == h);
  }
  CHECK(f16_to_f32(0x0001) == std::ldexp(1.0f, -24));
  CHECK(f16_to_f32(0x7bff) == 65504.0f);
  CHECK(f16_to_f32(0x3555) == 0.333251953125f);  // 2^-2 * (1 + 341/1024), exact
}

TEST_CASE("f32_to_bf16 rounds to nearest even; bf16_to_f32 is exact") {
  CHECK(f32_to_bf16(1.0f) == 0x3f80);
  CHECK(f32_to_bf16(from_bits(0x3f808000)) == 0x3f80);  // tie, even stays
  CHECK(f32_to_bf16(from_bits(0x3f818000)) == 0x3f82);  // tie, odd rounds up
  CHECK(f32_to_bf16(from_bits(0x3f808001)) == 0x3f81);  // above the tie
  CHECK(f32_to_bf16(from_bits(0x7f7fffff)) == 0x7f80);  // FLT_MAX rounds to inf
  CHECK((f32_to_bf16(std::nanf("")) & 0x7fff) > 0x7f80);
  for (uint32_t b = 0; b < 65536; ++b) {
    const float f = bf16_to_f32(static_cast<uint16_t>(b));
    if (!std::isnan(f)) REQUIRE(f32_to_bf16(f) == b);
  }
}

TEST_CASE("convert_elements: narrowing overflow is an error naming the tensor") {
  const float src[3] = {1.0f, 70000.0f, 2.0f};
  uint16_t dst[3];
  try {
    convert_elements(src, DType::F32, dst, DType::F16, 3, "model.layers.0.w");
    FAIL("expected an overflow error");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("model.layers.0.w") != std::string::npos);
    CHECK(std::string(e.what()).find("element 1") != std::string::npos);
  }
  // bf16 has the range of f32: no error; inf stays inf (not an overflow).
  convert_elements(src, DType::F32, dst, DType::BF16, 3, "w");
  CHECK(bf16_to_f32(dst[1]) == 70144.0f);  // 70000 rounded to 8 significant bits
  const float inf[1] = {std::numeric_limits<float>::infinity()};
  convert_elements(inf, DType::F32, dst, DType::F16, 1, "w");
  CHECK(dst[0] == 0x7c00);
  const uint16_t bf_big[1] = {0x4780};  // bf16 65536: overflows f16
  CHECK_THROWS_AS(convert_elements(bf_big, DType::BF16, dst, DType::F16, 1, "w"), Error);
}

TEST_CASE("dtype names and parsing") {
  CHECK(dtype_from_string("bfloat16") == DType::BF16);
  CHECK(dtype_from_string("F16") == DType::F16);
  CHECK(dtype_from_string("fp32") == DType::F32);
  CHECK(std::string(dtype_name(DType::BF16)) == "bf16");
  CHECK(dtype_size(DType::F32) == 4);
  CHECK_THROWS_AS(dtype_from_string("int8"), Error);
}
