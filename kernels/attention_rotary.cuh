// attention_rotary.cuh: the rotary embedding of one dim, as the attention kernels apply it when they
// fuse rotary + kv_cache append (AttentionParams::rotary_append). Shared by the tiled kernel
// (attention.cu) and the decode kernel (attention_decode.cu) so that both round exactly alike.
// Does not own: the in-place rotary kernel (rotary.cu), whose formula this one repeats.
#pragma once
#include "kernels/common.cuh"

namespace tpshard::cuda {

/// Dim d of head x after rotary embedding at position pos, as apply_rotary (rotary.cu) stores it:
/// computed in fp32, rounded once to T. Dims >= rot are returned unchanged. half = rot / 2;
/// inv_freq: [half] f32 (not read when d >= rot).
template <typename T>
__device__ __forceinline__ float rotated(const T* x, int d, int half, int rot, float pos, const float* inv_freq) {
  const float xd = to_f32(x[d]);
  if (d >= rot) return xd;
  const int i = d < half ? d : d - half;
  float s, c;
  sincosf(pos * inv_freq[i], &s, &c);
  if (d < half) {
    const float x1 = xd, x2 = to_f32(x[d + half]);
    return to_f32(from_f32<T>(x1 * c - x2 * s));
  }
  const float x1 = to_f32(x[d - half]), x2 = xd;
  return to_f32(from_f32<T>(x2 * c + x1 * s));
}

}  // namespace tpshard::cuda
