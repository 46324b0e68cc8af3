// attention_rotary.cuh: the rotary embedding of one dim, as the attention kernels apply it when they
// fuse rotary + kv_cache append (AttentionParams::rotary_append). Shared by the tiled kernel
// (attention.cu) and the decode kernel (attention_decode.cu) so that both round exactly alike.
// The in-place rotary kernel (rotary.cu) uses the same rotary_first / rotary_second.
#pragma once
#include "kernels/common.cuh"

namespace tpshard::cuda {

/// The rotated pair (x1 cos - x2 sin, x2 cos + x1 sin) with every product and sum rounded separately
/// (__fmul_rn / __fadd_rn: never contracted into FMAs), so every kernel that rotates (rotary.cu, the fused
/// attention kernels) gets bit-identical fp32 values whatever the compiler does around it.
__device__ __forceinline__ float rotary_first(float x1, float x2, float c, float s) {
  return __fsub_rn(__fmul_rn(x1, c), __fmul_rn(x2, s));
}
__device__ __forceinline__ float rotary_second(float x1, float x2, float c, float s) {
  return __fadd_rn(__fmul_rn(x2, c), __fmul_rn(x1, s));
}

/// cos and sin of angle a, each multiplied by factor (ModelConfig::rope_attention_factor, yarn's
/// attention scaling; 1 leaves them exact), as every rotating kernel computes them.
__device__ __forceinline__ void rotary_cos_sin(float a, float factor, float* c, float* s) {
  sincosf(a, s, c);
  *s = __fmul_rn(*s, factor);
  *c = __fmul_rn(*c, factor);
}

/// Dim d of head x after rotary embedding at position pos, as apply_rotary (rotary.cu) stores it:
/// computed in fp32, rounded once to T. Dims >= rot are returned unchanged. half = rot / 2;
/// inv_freq: [half] f32 (not read when d >= rot); factor multiplies cos and sin (rotary_cos_sin).
template <typename T>
__device__ __forceinline__ float rotated(const T* x, int d, int half, int rot, float pos, const float* inv_freq,
                                         float factor) {
  const float xd = to_f32(x[d]);
  if (d >= rot) return xd;
  const int i = d < half ? d : d - half;
  float s, c;
  rotary_cos_sin(pos * inv_freq[i], factor, &c, &s);
  if (d < half) {
    const float x1 = xd, x2 = to_f32(x[d + half]);
    return to_f32(from_f32<T>(rotary_first(x1, x2, c, s)));
  }
  const float x1 = to_f32(x[d - half]), x2 = xd;
  return to_f32(from_f32<T>(rotary_second(x1, x2, c, s)));
}

}  // namespace tpshard::cuda
