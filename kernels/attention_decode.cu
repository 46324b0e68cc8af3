// attention_decode.cu: the decode attention kernel (see attention_decode.cuh).
// One block of kWarps warps per (token, head, split). The split's keys are cut into kWarps contiguous
// ranges, one per warp. A warp walks its range kKeys keys at a time: lane L holds dims 4L..4L+3 (and
// 128+4L.. when head_dim > 128) of q, of each key's K and V row (one 8- or 16-byte load each, every
// load of the batch issued before any is used) and of the output accumulator; the score is a warp
// butterfly sum, and max / sum / output stay in registers (online softmax, FlashAttention
// arXiv:2205.14135). q (rotated, with rotary_append) is staged in shared memory by one dim per thread,
// and the warps are merged once through shared memory: two __syncthreads per block in all. Splits are
// merged by the last block of the (token, head) through split_counters, or by a combine kernel.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "kernels/attention_decode.cuh"
#include "kernels/attention_cascade.cuh"
#include "kernels/attention_rotary.cuh"
#include "kernels/common.cuh"
#include "kernels/pdl.cuh"

namespace tpshard::cuda {
namespace {

constexpr int kWarps = 8;
constexpr int kThreads = 32 * kWarps;
constexpr int kMaxHeadDim = 256;  // = 2 chunks of 32 lanes x 4 dims; also <= kThreads (one dim per thread in the merge)
constexpr int kMergeGroup = 8;    // split partials whose loads are issued together in the merge (more: registers)

/// The first key token t (a sequence of len keys) attends in this kernel: its prefix length when the
/// prefix pass of cascade attention (attention_cascade.cu) has attended keys [0, prefix_len), else 0 or
/// the local window's first key.
__device__ __forceinline__ int decode_first_key(const AttentionParams& p, int t, int len) {
  const int prefix = attention_prefix_len(p, t);
  return p.cascade_partial && prefix > 0 ? prefix : attention_first_key(len - 1, p.window);
}

/// Fold the prefix partials of cascade attention for (token t, head h), dim d, into the running state
/// (big, l, a): the same exp(m_s - M) weights as the split merge. Nothing when t has no cascade prefix.
__device__ __forceinline__ void fold_cascade_prefix(const AttentionParams& p, int t, int h, int d, float& big, float& l,
                                                    float& a) {
  const int prefix = attention_prefix_len(p, t);
  if (!p.cascade_partial || prefix <= 0) return;
  const int hd = p.head_dim;
  const int splits = attention_cascade_splits(prefix, p.cascade_max_splits);
  const float* part = p.cascade_partial + (static_cast<int64_t>(t) * p.num_heads + h) * p.cascade_max_splits * (hd + 2);
  for (int s = 0; s < splits; ++s) {
    const float* ps = part + static_cast<int64_t>(s) * (hd + 2);
    const float ms = __ldcg(ps + hd), ls = __ldcg(ps + hd + 1), as = __ldcg(ps + d);
    const float big_new = fmaxf(big, ms);  // finite: every prefix split holds a key
    const float corr = __expf(big - big_new), w = __expf(ms - big_new);  // big = -inf: corr 0
    l = l * corr + ls * w;
    a = a * corr + as * w;
    big = big_new;
  }
}

/// Merge the `splits` partials [acc(hd), m, l] of (token t, head h) into out: weights exp(m_s - M),
/// normalized by the weighted sum of l_s. kMergeGroup partials' loads are in flight at a time (one
/// round for up to 16 splits), merged with a running max across groups. Partials are read through L2
/// (__ldcg): other blocks of this kernel wrote them.
template <typename T>
__device__ void merge_partials(const AttentionParams& p, int t, int h, int splits) {
  const int hd = p.head_dim;
  const float* part = p.partial + (static_cast<int64_t>(t) * p.num_heads + h) * p.num_splits * (hd + 2);
  T* o = static_cast<T*>(p.out) + (static_cast<int64_t>(t) * p.num_heads + h) * hd;
  for (int d = threadIdx.x; d < hd; d += blockDim.x) {
    float big = -INFINITY, l = 0.f, a = 0.f;
    for (int s0 = 0; s0 < splits; s0 += kMergeGroup) {
      float ms[kMergeGroup], ls[kMergeGroup], as[kMergeGroup];
#pragma unroll
      for (int u = 0; u < kMergeGroup; ++u) {
        ms[u] = -INFINITY;
        ls[u] = 0.f;
        as[u] = 0.f;
        if (s0 + u < splits) {
          const float* ps = part + static_cast<int64_t>(s0 + u) * (hd + 2);
          ms[u] = __ldcg(ps + hd);
          ls[u] = __ldcg(ps + hd + 1);
          as[u] = __ldcg(ps + d);
        }
      }
      float big_new = big;
#pragma unroll
      for (int u = 0; u < kMergeGroup; ++u) big_new = fmaxf(big_new, ms[u]);
      if (big_new == -INFINITY) continue;  // only empty partials so far
      const float corr = __expf(big - big_new);  // big = -inf: 0
      l *= corr;
      a *= corr;
#pragma unroll
      for (int u = 0; u < kMergeGroup; ++u) {
        if (ms[u] > -INFINITY) {
          const float w = __expf(ms[u] - big_new);
          l += ls[u] * w;
          a += as[u] * w;
        }
      }
      big = big_new;
    }
    fold_cascade_prefix(p, t, h, d, big, l, a);
    o[d] = from_f32<T>(l > 0.f ? a / l : 0.f);
  }
}

/// NCH: 4-dim chunks per lane (1: head_dim <= 128, 2: <= 256). Block: kThreads threads.
/// Grid: (n, num_heads, num_splits); blocks with split >= attention_decode_splits(len, num_splits) exit.
template <typename T, int NCH>
__global__ void __launch_bounds__(kThreads, 3) attention_decode_kernel(AttentionParams p) {
  using Raw = typename Pack4<T>::Raw;
  // keys per warp batch: 32 registers of K and V loads per lane (8 keys for f16/bf16 up to hd 128)
  constexpr int kKeys = 16 / (NCH * static_cast<int>(sizeof(T)));
  __shared__ float acc_s[kWarps][kMaxHeadDim];
  __shared__ float m_s[kWarps], l_s[kWarps];
  __shared__ float q_s[kMaxHeadDim], knew_s[kMaxHeadDim], vnew_s[kMaxHeadDim];
  __shared__ bool last;

  const int t = blockIdx.x, h = blockIdx.y, split = blockIdx.z;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  griddep_wait();  // q and the kv_cache come from the previous kernels; every block waits before exit
  griddep_launch_dependents();
  const int hd = p.head_dim;
  const int len = p.positions[t] + 1;
  const int slot = p.slots[t];  // loaded together with the position
  const int first = decode_first_key(p, t, len);  // keys [first, len)
  const int splits = attention_decode_splits(len - first, p.num_splits);
  if (split >= splits) return;  // uniform over the block: before any __syncthreads
  const int key_begin = first + attention_split_begin(len - first, splits, split);
  const int cnt = first + attention_split_begin(len - first, splits, split + 1) - key_begin;
  const int wb = key_begin + attention_split_begin(cnt, kWarps, warp);
  const int we = key_begin + attention_split_begin(cnt, kWarps, warp + 1);
  const int pos = len - 1;
  // rotary_append: the last split's block appends the new key (position pos) and the warp whose range
  // ends there takes its K/V from shared memory: no block of this kernel reads pos from the kv_cache
  const bool new_key = p.rotary_append && wb < we && we == len;
  const int loop_end = new_key ? pos : we;  // keys [wb, loop_end) come from the kv_cache

  const int kvh = attention_kv_head(p, h);
  const int rows = attention_cache_rows(p);
  const int64_t base = (static_cast<int64_t>(slot) * p.num_kv_heads + kvh) * rows * hd;
  const T* kc = static_cast<const T*>(p.k_cache) + base;
  const T* vc = static_cast<const T*>(p.v_cache) + base;
  // Keys j < prefix come from the shared prefix's slot (same layout, same positions).
  const int prefix = attention_prefix_len(p, t);
  const int64_t pbase = prefix > 0 ? (static_cast<int64_t>(p.prefix_slots[t]) * p.num_kv_heads + kvh) * rows * hd : base;
  const T* kpc = static_cast<const T*>(p.k_cache) + pbase;
  const T* vpc = static_cast<const T*>(p.v_cache) + pbase;
  int dim0[NCH];
  bool has[NCH];  // lanes past head_dim (e.g. 20..31 at hd 80) hold zeros
#pragma unroll
  for (int c = 0; c < NCH; ++c) {
    dim0[c] = (c * 32 + lane) * 4;
    has[c] = dim0[c] < hd;
  }

  Raw kr[kKeys][NCH], vr[kKeys][NCH];
  auto load_batch = [&](int j0) {
#pragma unroll
    for (int u = 0; u < kKeys; ++u) {
#pragma unroll
      for (int c = 0; c < NCH; ++c) {
        kr[u][c] = Raw{};
        vr[u][c] = Raw{};
        if (j0 + u < loop_end && has[c]) {
          const int64_t at = kv_row(j0 + u, rows) * hd + dim0[c];
          const bool shared = j0 + u < prefix;
          kr[u][c] = *reinterpret_cast<const Raw*>((shared ? kpc : kc) + at);
          vr[u][c] = *reinterpret_cast<const Raw*>((shared ? vpc : vc) + at);
        }
      }
    }
  };
  if (wb < loop_end) load_batch(wb);  // in flight while q (and the new key) are prepared

  // q (rotated when rotary_append) and the new key through shared memory, one dim per thread: one
  // sincosf per thread instead of 8 per lane, and no rotary code holding registers next to the loads.
  const T* row = static_cast<const T*>(p.q) + static_cast<int64_t>(t) * p.q_stride;
  const T* qh = row + static_cast<int64_t>(h) * hd;
  const bool block_new_key = p.rotary_append && split == splits - 1;  // the last split holds pos
  const int half = p.rotary_ndims / 2;
  const float fpos = static_cast<float>(pos);
  for (int i = threadIdx.x; i < (block_new_key ? 2 : 1) * hd; i += kThreads) {
    if (i < hd) {
      q_s[i] = (p.rotary_append ? rotated(qh, i, half, p.rotary_ndims, fpos, p.inv_freq, p.rotary_attention_factor) : to_f32(qh[i])) * p.scale;
    } else {
      // Append the new key (every Q head of the GQA group writes the same bytes). Its K/V are used from
      // shared memory below, never read back from the kv_cache.
      const int d = i - hd;
      const T* kh = row + static_cast<int64_t>(p.num_heads + kvh) * hd;
      const T* vh = row + static_cast<int64_t>(p.num_heads + p.num_kv_heads + kvh) * hd;
      const float kf = rotated(kh, d, half, p.rotary_ndims, fpos, p.inv_freq, p.rotary_attention_factor);
      const T vt = vh[d];
      const_cast<T*>(kc)[kv_row(pos, rows) * hd + d] = from_f32<T>(kf);
      const_cast<T*>(vc)[kv_row(pos, rows) * hd + d] = vt;
      knew_s[d] = kf;
      vnew_s[d] = to_f32(vt);
    }
  }
  __syncthreads();
  float q[NCH][4], acc[NCH][4];
#pragma unroll
  for (int c = 0; c < NCH; ++c)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      q[c][e] = has[c] ? q_s[dim0[c] + e] : 0.f;
      acc[c][e] = 0.f;
    }
  float m = -INFINITY, l = 0.f;
  if (new_key) {  // the new key first in this warp's online softmax: m = its score, l = 1, acc = its V
    float s = 0.f;
#pragma unroll
    for (int c = 0; c < NCH; ++c)
      if (has[c])
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          s += q[c][e] * knew_s[dim0[c] + e];
          acc[c][e] = vnew_s[dim0[c] + e];
        }
    m = attention_softcap(warp_sum(s), p.softcap);
    l = 1.f;
  }

  for (int j0 = wb; j0 < loop_end; j0 += kKeys) {
    float s[kKeys];
#pragma unroll
    for (int u = 0; u < kKeys; ++u) {
      s[u] = 0.f;
#pragma unroll
      for (int c = 0; c < NCH; ++c) {
        float k4[4];
        unpack4<T>(kr[u][c], k4);
#pragma unroll
        for (int e = 0; e < 4; ++e) s[u] += q[c][e] * k4[e];
      }
    }
    // kKeys butterflies side by side; every lane ends with the same bits (a + b == b + a)
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
#pragma unroll
      for (int u = 0; u < kKeys; ++u) s[u] += __shfl_xor_sync(0xffffffffu, s[u], o);
    if (p.softcap > 0.f)  // uniform over the block
#pragma unroll
      for (int u = 0; u < kKeys; ++u) s[u] = attention_softcap(s[u], p.softcap);
    float m_new = m;
#pragma unroll
    for (int u = 0; u < kKeys; ++u)
      if (j0 + u < loop_end) m_new = fmaxf(m_new, s[u]);
    const float corr = __expf(m - m_new);  // m = -inf before the first key: 0
    l *= corr;
#pragma unroll
    for (int c = 0; c < NCH; ++c)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[c][e] *= corr;
#pragma unroll
    for (int u = 0; u < kKeys; ++u) {
      const float pu = j0 + u < loop_end ? __expf(s[u] - m_new) : 0.f;  // missing keys: V loaded as zeros
      l += pu;
#pragma unroll
      for (int c = 0; c < NCH; ++c) {
        float v4[4];
        unpack4<T>(vr[u][c], v4);
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[c][e] += pu * v4[e];
      }
    }
    m = m_new;
    if (j0 + kKeys < loop_end) load_batch(j0 + kKeys);
  }

  // Merge the warps once: weights exp(m_w - M) over the warps that saw keys.
  if (lane == 0) {
    m_s[warp] = m;
    l_s[warp] = l;
  }
#pragma unroll
  for (int c = 0; c < NCH; ++c)
    if (has[c])
#pragma unroll
      for (int e = 0; e < 4; ++e) acc_s[warp][dim0[c] + e] = acc[c][e];
  __syncthreads();
  if (threadIdx.x < hd) {
    const int d = threadIdx.x;
    float big = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) big = fmaxf(big, m_s[w]);
    float lb = 0.f, ab = 0.f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      if (m_s[w] > -INFINITY) {
        const float wt = __expf(m_s[w] - big);
        lb += l_s[w] * wt;
        ab += acc_s[w][d] * wt;
      }
    }
    if (splits == 1) {
      fold_cascade_prefix(p, t, h, d, big, lb, ab);
      T* o = static_cast<T*>(p.out) + (static_cast<int64_t>(t) * p.num_heads + h) * hd;
      o[d] = from_f32<T>(lb > 0.f ? ab / lb : 0.f);
    } else {
      float* part = p.partial + ((static_cast<int64_t>(t) * p.num_heads + h) * p.num_splits + split) * (hd + 2);
      part[d] = ab;
      if (d == 0) {
        part[hd] = big;
        part[hd + 1] = lb;
      }
    }
  }
  if (splits > 1 && p.split_counters) {  // uniform over the block
    // The last block of this (token, head) to finish merges the partials (threadfence reduction, CUDA
    // programming guide "Memory Fence Functions"): publish ours, count, and the last one reads all.
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) {
      int* counter = p.split_counters + static_cast<int64_t>(t) * p.num_heads + h;
      last = atomicAdd(counter, 1) == splits - 1;
      if (last) *counter = 0;  // ready for the next call (a later kernel: stream order)
    }
    __syncthreads();
    if (last) {
      __threadfence();
      merge_partials<T>(p, t, h, splits);
    }
  }
}

/// The separate split merge (no split_counters): one block per (token, head); nothing to do for the
/// tokens whose sequence used one split (their attention block wrote out itself).
template <typename T>
__global__ void attention_decode_combine_kernel(AttentionParams p) {
  griddep_wait();
  griddep_launch_dependents();
  const int t = blockIdx.x, h = blockIdx.y;
  const int len = p.positions[t] + 1;
  const int splits = attention_decode_splits(len - decode_first_key(p, t, len), p.num_splits);
  if (splits > 1) merge_partials<T>(p, t, h, splits);
}

}  // namespace

bool attention_decode_supported(const AttentionParams& p) {
  const size_t align = 4 * dtype_size(p.dtype);
  return p.head_dim > 0 && p.head_dim <= kMaxHeadDim && p.head_dim % 4 == 0 &&
         reinterpret_cast<uintptr_t>(p.k_cache) % align == 0 && reinterpret_cast<uintptr_t>(p.v_cache) % align == 0;
}

void attention_decode(const AttentionParams& p, cudaStream_t stream) {
  if (p.n == 0) return;
  attention_validate(p);
  TPS_CHECK(attention_decode_supported(p),
            "kernels/attention_decode: head_dim " + std::to_string(p.head_dim) +
                " is not a multiple of 4 (or > 256), or k_cache/v_cache are not aligned to 4 elements",
            "call attention(), which falls back to the tiled kernel for such shapes");
  TPS_CHECK(static_cast<int64_t>(p.max_seq_len) * std::max(p.num_splits, kWarps) < (int64_t{1} << 32),
            "kernels/attention_decode: max_seq_len " + std::to_string(p.max_seq_len) + " x num_splits " +
                std::to_string(p.num_splits) + " does not fit the kernel's 32-bit key ranges",
            "use fewer splits or a shorter max_seq_len");
  // Cascade: the prefix pass first; the decode kernel then attends keys from prefix_len on and merges.
  AttentionParams d = p;
  if (attention_cascade_supported(p)) {
    attention_cascade_prefix(p, stream);
  } else {
    d.cascade_partial = nullptr;  // a local window or an unsupported shape: the decode kernel reads the prefix
  }
  const dim3 grid(d.n, d.num_heads, d.num_splits);
  if (d.head_dim > 128) {
    TPS_DISPATCH_DTYPE(d.dtype, T, launch_pdl(attention_decode_kernel<T, 2>, grid, dim3(kThreads), 0, stream, d));
  } else {
    TPS_DISPATCH_DTYPE(d.dtype, T, launch_pdl(attention_decode_kernel<T, 1>, grid, dim3(kThreads), 0, stream, d));
  }
  check_launch("attention_decode_kernel");
  if (d.num_splits > 1 && !d.split_counters) {
    TPS_DISPATCH_DTYPE(d.dtype, T,
                       launch_pdl(attention_decode_combine_kernel<T>, dim3(d.n, d.num_heads), dim3(128), 0, stream, d));
    check_launch("attention_decode_combine_kernel");
  }
}

}  // namespace tpshard::cuda
