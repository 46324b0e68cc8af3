// dtype.h: element types stored in shard files, and exact conversions between them.
// fp32 -> fp16/bf16 narrowing rounds to nearest, ties to even (IEEE 754 roundTiesToEven).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace tpshard {

/// Element type of a stored tensor. Values are part of the file format (docs/FORMAT.md): never renumber.
enum class DType : uint8_t { F32 = 0, F16 = 1, BF16 = 2 };

/// Bytes per element: 4, 2, 2.
size_t dtype_size(DType t);
/// "f32" / "f16" / "bf16" (also the spelling used in manifest.json).
const char* dtype_name(DType t);
/// Parse "f32"/"float32"/"fp32", "f16"/"float16"/"fp16", "bf16"/"bfloat16"; safetensors' "F32"/"F16"/"BF16".
/// Throws Error naming the string when unknown.
DType dtype_from_string(const std::string& s);

/// Exact widening conversions.
float f16_to_f32(uint16_t h);
float bf16_to_f32(uint16_t b);
/// Narrowing with round-to-nearest-even. NaN stays NaN; finite values beyond the range become +-inf,
/// so converters must check finiteness first (see convert_elements).
uint16_t f32_to_f16(float f);
uint16_t f32_to_bf16(float f);

/// Convert n elements from src (type from) to dst (type to). Throws Error when a finite source value
/// overflows the destination type (e.g. 70000.0 to f16); `what` names the tensor in that message.
void convert_elements(const void* src, DType from, void* dst, DType to, size_t n, const std::string& what);

/// Count NaN and +-inf among n elements of src (type t), by the IEEE exponent field (all ones): no
/// float conversion. Returns the total non-finite count; *nan_count (when non-null) gets the NaNs.
uint64_t count_nonfinite(const void* src, DType t, size_t n, uint64_t* nan_count = nullptr);

}  // namespace tpshard
