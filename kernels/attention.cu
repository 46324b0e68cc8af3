// attention.cu: causal varlen attention over the kv_cache with optional split-K (see attention.cuh).
// One block per (token, head, split); keys in tiles of kTile with a running max and sum; a warp
// computes one key's score at a time; then each thread accumulates one output dim over its share of
// the tile's keys. attention() sends decode steps to the decode kernel (attention_decode.cu).
#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "kernels/attention.cuh"
#include "kernels/attention_decode.cuh"
#include "kernels/attention_prefill.cuh"
#include "kernels/attention_rotary.cuh"
#include "kernels/common.cuh"
#include "kernels/pdl.cuh"

namespace tpshard::cuda {
namespace {

constexpr int kTile = 128;

template <typename T>
__device__ void combine_splits(const AttentionParams& p, int t, int h);

template <typename T>
__global__ void attention_kernel(AttentionParams p) {
  extern __shared__ float smem[];
  const int hd = p.head_dim;
  float* q_s = smem;              // [hd]
  float* p_s = q_s + hd;          // [kTile]
  float* red = p_s + kTile;       // [32] reduction scratch
  float* acc_s = red + 32;        // [groups, hd]
  const int t = blockIdx.x, h = blockIdx.y, split = blockIdx.z;
  griddep_wait();  // q (and the kv_cache) come from the previous kernels
  griddep_launch_dependents();
  const int kvh = attention_kv_head(p, h);
  const int len = p.positions[t] + 1;
  const int first = attention_first_key(len - 1, p.window);  // keys [first, len)
  const int per_split = (len - first + p.num_splits - 1) / p.num_splits;
  const int key_begin = first + split * per_split;
  const int key_end = min(len, key_begin + per_split);

  const T* q = static_cast<const T*>(p.q) + static_cast<int64_t>(t) * p.q_stride + static_cast<int64_t>(h) * hd;
  const int rows = attention_cache_rows(p);
  const int64_t base = (static_cast<int64_t>(p.slots[t]) * p.num_kv_heads + kvh) * rows * hd;
  const T* k = static_cast<const T*>(p.k_cache) + base;
  const T* v = static_cast<const T*>(p.v_cache) + base;
  // Keys j < prefix come from the shared prefix's slot (same layout, same positions).
  const int prefix = attention_prefix_len(p, t);
  const int64_t pbase = prefix > 0 ? (static_cast<int64_t>(p.prefix_slots[t]) * p.num_kv_heads + kvh) * rows * hd : base;
  const T* kp = static_cast<const T*>(p.k_cache) + pbase;
  const T* vp = static_cast<const T*>(p.v_cache) + pbase;
  if (p.rotary_append) {
    const int pos = len - 1, half = p.rotary_ndims / 2;
    for (int d = threadIdx.x; d < hd; d += blockDim.x)
      q_s[d] = rotated(q, d, half, p.rotary_ndims, static_cast<float>(pos), p.inv_freq, p.rotary_attention_factor) * p.scale;
    if (key_begin <= pos && pos < key_end) {
      // This block attends over the new key: append it (every Q head of the GQA group writes the same
      // bytes; the __syncthreads below makes them visible to this block's reads).
      const T* row = static_cast<const T*>(p.q) + static_cast<int64_t>(t) * p.q_stride;
      const T* kr = row + static_cast<int64_t>(p.num_heads + kvh) * hd;
      const T* vr = row + static_cast<int64_t>(p.num_heads + p.num_kv_heads + kvh) * hd;
      T* kd = const_cast<T*>(k) + kv_row(pos, rows) * hd;
      T* vd = const_cast<T*>(v) + kv_row(pos, rows) * hd;
      for (int d = threadIdx.x; d < hd; d += blockDim.x) {
        kd[d] = from_f32<T>(rotated(kr, d, half, p.rotary_ndims, static_cast<float>(pos), p.inv_freq, p.rotary_attention_factor));
        vd[d] = vr[d];
      }
    }
  } else {
    for (int d = threadIdx.x; d < hd; d += blockDim.x) q_s[d] = to_f32(q[d]) * p.scale;
  }

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  const int groups = blockDim.x / hd;  // threads tid < groups*hd own dim tid % hd of key group tid / hd
  const int my_d = threadIdx.x % hd, my_g = threadIdx.x / hd;
  float m = -INFINITY, l = 0.f, acc = 0.f;
  __syncthreads();
  for (int j0 = key_begin; j0 < key_end; j0 += kTile) {
    const int cnt = min(kTile, key_end - j0);
    // kKeys keys per warp at a time, their loads issued together: at decode a split holds few keys and
    // the time is load latency, not bandwidth (measured with tools/bench_kernels).
    constexpr int kKeys = 4;
    for (int jj0 = warp; jj0 < cnt; jj0 += kKeys * nwarps) {
      float s[kKeys];
#pragma unroll
      for (int u = 0; u < kKeys; ++u) {
        const int jj = jj0 + u * nwarps;  // uniform across the warp
        s[u] = 0.f;
        if (jj < cnt) {
          const T* kr = (j0 + jj < prefix ? kp : k) + kv_row(j0 + jj, rows) * hd;
#pragma unroll 4
          for (int d = lane; d < hd; d += 32) s[u] += q_s[d] * to_f32(kr[d]);
        }
      }
#pragma unroll
      for (int u = 0; u < kKeys; ++u) {
        const float r = attention_softcap(warp_sum(s[u]), p.softcap);
        if (lane == 0 && jj0 + u * nwarps < cnt) p_s[jj0 + u * nwarps] = r;
      }
    }
    __syncthreads();
    float tmax = -INFINITY;
    for (int jj = threadIdx.x; jj < cnt; jj += blockDim.x) tmax = fmaxf(tmax, p_s[jj]);
    tmax = block_max(tmax, red);
    const float m_new = fmaxf(m, tmax);
    const float corr = __expf(m - m_new);  // m = -inf on the first tile: corr = 0
    float tsum = 0.f;
    for (int jj = threadIdx.x; jj < cnt; jj += blockDim.x) {
      const float e = __expf(p_s[jj] - m_new);
      p_s[jj] = e;
      tsum += e;
    }
    tsum = block_sum(tsum, red);  // includes __syncthreads: p_s is complete after this
    l = l * corr + tsum;
    acc *= corr;
    if (my_g < groups) {
#pragma unroll 8
      for (int jj = my_g; jj < cnt; jj += groups)
        acc += p_s[jj] * to_f32((j0 + jj < prefix ? vp : v)[kv_row(j0 + jj, rows) * hd + my_d]);
    }
    m = m_new;
    __syncthreads();  // p_s is overwritten by the next tile
  }
  if (my_g < groups) acc_s[my_g * hd + my_d] = acc;
  __syncthreads();
  if (threadIdx.x < hd) {
    float a = 0.f;
    for (int g = 0; g < groups; ++g) a += acc_s[g * hd + threadIdx.x];
    if (p.num_splits == 1) {
      T* o = static_cast<T*>(p.out) + static_cast<int64_t>(t) * p.num_heads * hd + static_cast<int64_t>(h) * hd;
      o[threadIdx.x] = from_f32<T>(l > 0.f ? a / l : 0.f);
    } else {
      float* part = p.partial + ((static_cast<int64_t>(t) * p.num_heads + h) * p.num_splits + split) * (hd + 2);
      part[threadIdx.x] = a;
      if (threadIdx.x == 0) {
        part[hd] = m;
        part[hd + 1] = l;
      }
    }
  }
  if (p.num_splits > 1 && p.split_counters) {
    // Last block of this (token, head) to finish merges the partials (threadfence reduction, CUDA
    // programming guide "Memory Fence Functions"): publish ours, count, and the last one reads all.
    __shared__ bool last;
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) {
      int* counter = p.split_counters + static_cast<int64_t>(t) * p.num_heads + h;
      last = atomicAdd(counter, 1) == p.num_splits - 1;
      if (last) *counter = 0;  // ready for the next call (a later kernel: stream order)
    }
    __syncthreads();
    if (last) {
      __threadfence();
      combine_splits<T>(p, t, h);
    }
  }
}

/// Merge the split-K partials of (token t, head h) with the block's threads: weights exp(m_s - M),
/// normalized by the summed l. Partials are read through L2 (other blocks wrote them).
template <typename T>
__device__ void combine_splits(const AttentionParams& p, int t, int h) {
  const int hd = p.head_dim;
  const float* part = p.partial + (static_cast<int64_t>(t) * p.num_heads + h) * p.num_splits * (hd + 2);
  float big = -INFINITY;
  for (int s = 0; s < p.num_splits; ++s) big = fmaxf(big, __ldcg(part + s * (hd + 2) + hd));
  float l = 0.f;
  for (int s = 0; s < p.num_splits; ++s) {
    const float ms = __ldcg(part + s * (hd + 2) + hd);
    if (ms > -INFINITY) l += __ldcg(part + s * (hd + 2) + hd + 1) * __expf(ms - big);
  }
  T* o = static_cast<T*>(p.out) + static_cast<int64_t>(t) * p.num_heads * hd + static_cast<int64_t>(h) * hd;
  for (int d = threadIdx.x; d < hd; d += blockDim.x) {
    float a = 0.f;
    for (int s = 0; s < p.num_splits; ++s) {
      const float ms = __ldcg(part + s * (hd + 2) + hd);
      if (ms > -INFINITY) a += __ldcg(part + s * (hd + 2) + d) * __expf(ms - big);
    }
    o[d] = from_f32<T>(l > 0.f ? a / l : 0.f);
  }
}

/// The separate merge kernel (when no split_counters are given): one block per (token, head).
template <typename T>
__global__ void attention_combine_kernel(AttentionParams p) {
  griddep_wait();
  griddep_launch_dependents();
  combine_splits<T>(p, blockIdx.x, blockIdx.y);
}

}  // namespace

int attention_num_splits(int n, int num_heads, int max_context, int max_splits) {
  static int sms = [] {
    int dev = 0, count = 132;
    if (cudaGetDevice(&dev) == cudaSuccess) cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, dev);
    return count;
  }();
  // Enough blocks for two waves over the SMs, but at least kMinSplitKeys keys per split: a block walks its
  // keys one dependent load chain after another, so at batch 1 fewer keys per block is what shortens the
  // step (measured: one split per head left Pythia-1.4B decode at 24% of the HBM roofline).
  constexpr int kMinSplitKeys = 16;
  const int pairs = std::max(1, n * num_heads);
  int splits = (2 * sms + pairs - 1) / pairs;
  splits = std::min(splits, std::max(1, max_context / kMinSplitKeys));
  return std::max(1, std::min(splits, max_splits));
}

void attention_validate(const AttentionParams& p) {
  const bool even = p.kv_group == 0 && p.head_offset == 0 && p.num_kv_heads > 0 && p.num_heads % p.num_kv_heads == 0;
  const bool mapped = p.kv_group > 0 && p.head_offset >= 0 && p.head_offset < p.kv_group && p.num_heads > 0 &&
                      p.num_kv_heads > 0 && attention_kv_head(p, p.num_heads - 1) == p.num_kv_heads - 1;
  TPS_CHECK(p.head_dim > 0 && p.head_dim <= 256 && (even || mapped),
            "kernels/attention: unsupported head_dim " + std::to_string(p.head_dim) + " or heads " +
                std::to_string(p.num_heads) + "/" + std::to_string(p.num_kv_heads) + " (kv_group " +
                std::to_string(p.kv_group) + ", head_offset " + std::to_string(p.head_offset) + ")",
            "head_dim must be <= 256, and the Q heads must read exactly the num_kv_heads KV heads");
  TPS_CHECK(p.softcap >= 0.f && p.softcap < INFINITY, "kernels/attention: softcap " + std::to_string(p.softcap),
            "pass AttentionParams::softcap 0 (none) or a positive cap");
  TPS_CHECK(p.window >= 0, "kernels/attention: negative window " + std::to_string(p.window),
            "pass AttentionParams::window 0 (all positions) or the local window");
  TPS_CHECK(p.kv_positions == 0 || p.kv_positions >= p.max_seq_len || (p.window > 0 && p.kv_positions >= p.window),
            "kernels/attention: a ring of " + std::to_string(p.kv_positions) + " kv_cache rows for window " +
                std::to_string(p.window),
            "size the ring with model/kv_ring.h (at least the window)");
  TPS_CHECK(p.num_splits == 1 || p.partial, "kernels/attention: num_splits > 1 needs the partial workspace",
            "pass AttentionParams::partial");
  TPS_CHECK(!p.rotary_append || p.rotary_ndims == 0 || (p.inv_freq && p.rotary_ndims % 2 == 0 && p.rotary_ndims <= p.head_dim),
            "kernels/attention: rotary_append needs inv_freq and an even rotary_ndims <= head_dim",
            "pass AttentionParams::inv_freq / rotary_ndims");
}

void attention(const AttentionParams& p, cudaStream_t stream) {
  if ((p.decode || p.rotary_append) && attention_decode_supported(p)) {
    attention_decode(p, stream);
  } else if (attention_prefill_supported(p)) {
    attention_prefill(p, stream);
  } else {
    attention_tiled(p, stream);
  }
}

void attention_tiled(const AttentionParams& p, cudaStream_t stream) {
  if (p.n == 0) return;
  attention_validate(p);
  const int threads = p.head_dim > 128 ? 256 : 128;
  const int groups = threads / p.head_dim;
  const size_t smem = sizeof(float) * (p.head_dim + kTile + 32 + static_cast<size_t>(groups) * p.head_dim);
  dim3 grid(p.n, p.num_heads, p.num_splits);
  TPS_DISPATCH_DTYPE(p.dtype, T, launch_pdl(attention_kernel<T>, grid, dim3(threads), smem, stream, p));
  check_launch("attention_kernel");
  if (p.num_splits > 1 && !p.split_counters) {
    TPS_DISPATCH_DTYPE(p.dtype, T,
                       launch_pdl(attention_combine_kernel<T>, dim3(p.n, p.num_heads), dim3(128), 0, stream, p));
    check_launch("attention_combine_kernel");
  }
}

}  // namespace tpshard::cuda
