// attention_prefill.cu: the tensor-core prefill attention (see attention_prefill.cuh).
// Block = (query tile, head), 4 warps; warp w owns query rows 16w .. 16w + 15 of the tile. Per key tile of
// BK keys: the block copies K and V rows into shared memory (rows padded by 8 elements: the fragment
// loads below hit distinct banks), each warp computes S = Q K^T (16 x BK, fp32) with mma.sync, masks,
// updates its rows' running max and sum, and accumulates O += P V in registers. Fragment layouts are
// those of mma.m16n8k16 in the PTX ISA ("Matrix Fragments for mma.m16n8k16"): with g = lane / 4 and
// q = lane % 4, A holds rows g and g + 8 at columns 2q, 2q + 1 (+ 8); B holds column g at rows 2q, 2q + 1
// (+ 8); C holds rows g and g + 8 at columns 2q, 2q + 1. The S accumulator of two adjacent 8-key
// column blocks is exactly the A fragment of a 16-key P block, so P never leaves registers.
#include <cstdint>
#include <string>

#include "kernels/attention_prefill.cuh"
#include "kernels/common.cuh"
#include "kernels/kv_cache.cuh"
#include "kernels/pdl.cuh"

namespace tpshard::cuda {
namespace {

constexpr int kWarps = kPrefillTileRows / 16;

/// Two T values as one 32-bit register, lo in the low half (the lower column / row index).
template <typename T>
__device__ __forceinline__ uint32_t pack_pair(T lo, T hi) {
  const uint16_t a = *reinterpret_cast<const uint16_t*>(&lo), b = *reinterpret_cast<const uint16_t*>(&hi);
  return static_cast<uint32_t>(a) | (static_cast<uint32_t>(b) << 16);
}

/// Two fp32 values rounded to T, packed as pack_pair.
template <typename T>
__device__ __forceinline__ uint32_t pack_f32(float lo, float hi) {
  return pack_pair<T>(from_f32<T>(lo), from_f32<T>(hi));
}

/// c += a (16x16, row) * b (16x8, col), fp32 accumulate.
template <typename T>
__device__ __forceinline__ void mma_16816(float (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]);

template <>
__device__ __forceinline__ void mma_16816<__half>(float (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

template <>
__device__ __forceinline__ void mma_16816<__nv_bfloat16>(float (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

/// Shared memory of one block: Q tile, K tile, V tile, rows of D + 8 elements.
template <int D, int BK>
constexpr size_t prefill_smem_bytes() {
  return static_cast<size_t>(kPrefillTileRows + 2 * BK) * (D + 8) * 2;
}

template <typename T, int D, int BK>
__global__ void __launch_bounds__(kWarps * 32) attention_prefill_kernel(AttentionParams p) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  constexpr int LD = D + 8;       // shared row stride (elements)
  constexpr int kChunks = D / 8;  // 16-byte pieces per row
  T* qs = reinterpret_cast<T*>(smem_raw);
  T* ks = qs + kPrefillTileRows * LD;
  T* vs = ks + BK * LD;
  const int tile = blockIdx.x, h = blockIdx.y;
  griddep_wait();  // q and the kv_cache come from the previous kernels
  griddep_launch_dependents();
  const int t0 = p.q_tiles[tile];
  const int rows = (tile + 1 < p.num_q_tiles ? p.q_tiles[tile + 1] : p.n) - t0;
  const int pos0 = p.positions[t0];
  const int prefix = attention_prefix_len(p, t0);
  const int kvh = attention_kv_head(p, h);
  const int cache_rows = attention_cache_rows(p);
  const int64_t base = (static_cast<int64_t>(p.slots[t0]) * p.num_kv_heads + kvh) * cache_rows * D;
  const int64_t pbase =
      prefix > 0 ? (static_cast<int64_t>(p.prefix_slots[t0]) * p.num_kv_heads + kvh) * cache_rows * D : base;
  const T* kc = static_cast<const T*>(p.k_cache);
  const T* vc = static_cast<const T*>(p.v_cache);

  for (int i = threadIdx.x; i < kPrefillTileRows * kChunks; i += blockDim.x) {
    const int r = i / kChunks, c = i % kChunks;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (r < rows)
      v = *reinterpret_cast<const uint4*>(static_cast<const T*>(p.q) + static_cast<int64_t>(t0 + r) * p.q_stride +
                                          static_cast<int64_t>(h) * D + c * 8);
    *reinterpret_cast<uint4*>(qs + r * LD + c * 8) = v;
  }

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, q4 = lane & 3;
  const int wrow0 = warp * 16;
  const bool active = wrow0 < rows;
  const int pos_lo = pos0 + wrow0 + g, pos_hi = pos_lo + 8;  // this thread's two rows
  const int warp_last_pos = pos0 + min(rows, wrow0 + 16) - 1;
  const int warp_first_key = attention_first_key(pos0 + wrow0, p.window);
  const int key_first = attention_first_key(pos0, p.window), key_end = pos0 + rows;

  float o[D / 8][4];
#pragma unroll
  for (int d = 0; d < D / 8; ++d) o[d][0] = o[d][1] = o[d][2] = o[d][3] = 0.f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};

  for (int kb = key_first; kb < key_end; kb += BK) {
    __syncthreads();  // the previous K/V tile is consumed
    for (int i = threadIdx.x; i < BK * kChunks; i += blockDim.x) {
      const int r = i / kChunks, c = i % kChunks, j = kb + r;
      uint4 kv = make_uint4(0, 0, 0, 0), vv = kv;
      if (j < key_end) {
        const int64_t off = (j < prefix ? pbase : base) + kv_row(j, cache_rows) * D + c * 8;
        kv = *reinterpret_cast<const uint4*>(kc + off);
        vv = *reinterpret_cast<const uint4*>(vc + off);
      }
      *reinterpret_cast<uint4*>(ks + r * LD + c * 8) = kv;
      *reinterpret_cast<uint4*>(vs + r * LD + c * 8) = vv;
    }
    __syncthreads();  // K, V (and Q on the first tile) are in shared memory
    if (!active || kb > warp_last_pos || kb + BK <= warp_first_key) continue;  // all masked for this warp

    float s[BK / 8][4];
#pragma unroll
    for (int n = 0; n < BK / 8; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f;
#pragma unroll
    for (int kk = 0; kk < D; kk += 16) {
      const T* qr = qs + (wrow0 + g) * LD + kk + 2 * q4;
      const uint32_t a[4] = {*reinterpret_cast<const uint32_t*>(qr), *reinterpret_cast<const uint32_t*>(qr + 8 * LD),
                             *reinterpret_cast<const uint32_t*>(qr + 8),
                             *reinterpret_cast<const uint32_t*>(qr + 8 * LD + 8)};
#pragma unroll
      for (int n = 0; n < BK / 8; ++n) {
        const T* kr = ks + (n * 8 + g) * LD + kk + 2 * q4;
        const uint32_t b[2] = {*reinterpret_cast<const uint32_t*>(kr), *reinterpret_cast<const uint32_t*>(kr + 8)};
        mma_16816<T>(s[n], a, b);
      }
    }

    // mask, scale, soft-cap; the running max of each of the thread's two rows over its quad
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int n = 0; n < BK / 8; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int j = kb + n * 8 + 2 * q4 + (e & 1);
        const int pos = e < 2 ? pos_lo : pos_hi;
        const bool ok = pos - pos0 < rows && j <= pos && j >= attention_first_key(pos, p.window);
        const float v = ok ? attention_softcap(s[n][e] * p.scale, p.softcap) : -INFINITY;
        s[n][e] = v;
        mx[e >> 1] = fmaxf(mx[e >> 1], v);
      }
    }
    float base_m[2], corr[2], sum[2] = {0.f, 0.f};
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
      const float m_new = fmaxf(m[r], mx[r]);
      base_m[r] = m_new == -INFINITY ? 0.f : m_new;  // a row with no key yet: every exp below is 0
      corr[r] = __expf(m[r] - base_m[r]);            // m = -inf: 0
      m[r] = m_new;
    }
#pragma unroll
    for (int n = 0; n < BK / 8; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        s[n][e] = __expf(s[n][e] - base_m[e >> 1]);
        sum[e >> 1] += s[n][e];
      }
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      sum[r] += __shfl_xor_sync(0xffffffffu, sum[r], 1);
      sum[r] += __shfl_xor_sync(0xffffffffu, sum[r], 2);
      l[r] = l[r] * corr[r] + sum[r];
    }
#pragma unroll
    for (int d = 0; d < D / 8; ++d) {
      o[d][0] *= corr[0];
      o[d][1] *= corr[0];
      o[d][2] *= corr[1];
      o[d][3] *= corr[1];
    }

    // O += P V: P's A fragment of keys 16c .. 16c + 15 is S of column blocks 2c and 2c + 1
#pragma unroll
    for (int c = 0; c < BK / 16; ++c) {
      const uint32_t a[4] = {pack_f32<T>(s[2 * c][0], s[2 * c][1]), pack_f32<T>(s[2 * c][2], s[2 * c][3]),
                             pack_f32<T>(s[2 * c + 1][0], s[2 * c + 1][1]),
                             pack_f32<T>(s[2 * c + 1][2], s[2 * c + 1][3])};
      const T* v0 = vs + (c * 16 + 2 * q4) * LD + g;
#pragma unroll
      for (int d = 0; d < D / 8; ++d) {
        const T* v = v0 + d * 8;
        const uint32_t b[2] = {pack_pair<T>(v[0], v[LD]), pack_pair<T>(v[8 * LD], v[9 * LD])};
        mma_16816<T>(o[d], a, b);
      }
    }
  }

  if (!active) return;
  const float inv[2] = {l[0] > 0.f ? 1.f / l[0] : 0.f, l[1] > 0.f ? 1.f / l[1] : 0.f};
  const int row_lo = wrow0 + g, row_hi = row_lo + 8;
  T* out = static_cast<T*>(p.out) + static_cast<int64_t>(h) * D + 2 * q4;
  const int64_t out_stride = static_cast<int64_t>(p.num_heads) * D;
#pragma unroll
  for (int d = 0; d < D / 8; ++d) {
    if (row_lo < rows)
      *reinterpret_cast<uint32_t*>(out + (t0 + row_lo) * out_stride + d * 8) =
          pack_f32<T>(o[d][0] * inv[0], o[d][1] * inv[0]);
    if (row_hi < rows)
      *reinterpret_cast<uint32_t*>(out + (t0 + row_hi) * out_stride + d * 8) =
          pack_f32<T>(o[d][2] * inv[1], o[d][3] * inv[1]);
  }
}

template <typename T, int D>
void launch(const AttentionParams& p, cudaStream_t stream) {
  constexpr int BK = D <= 128 ? 64 : 32;  // D = 256: fewer score registers next to 128 accumulators
  constexpr size_t smem = prefill_smem_bytes<D, BK>();
  const cudaError_t attr = allow_dynamic_smem<attention_prefill_kernel<T, D, BK>>(static_cast<int>(smem));
  if (attr != cudaSuccess)
    throw Error(std::string("kernels/attention_prefill: cannot allow ") + std::to_string(smem) +
                    " bytes of shared memory: " + cudaGetErrorString(attr),
                "run on a GPU of compute capability 8.0 or later");
  launch_pdl(attention_prefill_kernel<T, D, BK>, dim3(p.num_q_tiles, p.num_heads), dim3(kWarps * 32), smem, stream, p);
  check_launch("attention_prefill_kernel");
}

template <typename T>
void launch_for_head_dim(const AttentionParams& p, cudaStream_t stream) {
  switch (p.head_dim) {
    case 64: return launch<T, 64>(p, stream);
    case 80: return launch<T, 80>(p, stream);
    case 96: return launch<T, 96>(p, stream);
    case 128: return launch<T, 128>(p, stream);
    case 256: return launch<T, 256>(p, stream);
  }
}

}  // namespace

bool attention_prefill_supported(const AttentionParams& p) {
  const bool dim = p.head_dim == 64 || p.head_dim == 80 || p.head_dim == 96 || p.head_dim == 128 || p.head_dim == 256;
  return (p.dtype == DType::F16 || p.dtype == DType::BF16) && dim && p.q_tiles && p.num_q_tiles > 0 && !p.decode &&
         !p.rotary_append;
}

void attention_prefill(const AttentionParams& p, cudaStream_t stream) {
  if (p.n == 0) return;
  attention_validate(p);
  TPS_CHECK(attention_prefill_supported(p),
            "kernels/attention_prefill: unsupported call (dtype " + std::string(dtype_name(p.dtype)) + ", head_dim " +
                std::to_string(p.head_dim) + ", " + std::to_string(p.num_q_tiles) + " query tiles)",
            "use attention(), which falls back to attention_tiled() for such shapes");
  if (p.dtype == DType::F16) {
    launch_for_head_dim<__half>(p, stream);
  } else {
    launch_for_head_dim<__nv_bfloat16>(p, stream);
  }
}

}  // namespace tpshard::cuda
