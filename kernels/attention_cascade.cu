// attention_cascade.cu: the prefix pass of cascade decode attention (see attention_cascade.cuh).
// Grid (ceil(n / R), num_kv_heads, cascade_max_splits) of kThreads threads; R =
// attention_cascade_seqs_per_block(). Block x takes step rows [x R, x R + R). Thread 0 groups those
// rows by (prefix slot, prefix length); for each group the block walks its split's prefix keys in
// tiles of kTileKeys:
//  1. the tile's K and V rows of the block's KV head go to shared memory as f32 (each element read
//     from the kv_cache once, whatever the number of rows sharing it);
//  2. warp w takes queries w, w + kWarps, ...: lane k scores key k against the query in shared memory
//     (K rows padded to head_dim + 1 floats: no bank conflicts), then warp max / sum update the query's
//     running max m and sum l (FlashAttention's online softmax, arXiv:2205.14135) and the tile's
//     probabilities go to shared memory;
//  3. every thread updates its output elements (element e = tid + kThreads i of the [queries, head_dim]
//     accumulator) with sum_k p[q][k] V[k][d].
// Queries of a group: q = member * heads_of_kv_head + (h - first head of the KV head).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <string>

#include "kernels/attention_cascade.cuh"
#include "kernels/attention_decode.cuh"
#include "kernels/attention_rotary.cuh"
#include "kernels/common.cuh"
#include "kernels/pdl.cuh"

namespace tpshard::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kTileKeys = 32;        // = warp size: lane k scores key k of the tile
constexpr int kMaxHeadDim = 256;
constexpr int kMaxRows = 64;         // rows per block (one bit each in thread 0's mask)
constexpr int kMaxQueries = 256;     // queries per block (rows x query heads of the KV head)
constexpr int kQueryElems = 8192;    // queries x head_dim per block
constexpr int kAccPerThread = kQueryElems / kThreads;
constexpr int kLoads = kTileKeys * kMaxHeadDim / 4 / kThreads;  // Pack4 loads of K (and of V) per thread and tile

/// Dynamic shared memory (floats) for qmax queries of head_dim hd: q [qmax, hd], K tile [kTileKeys,
/// hd + 1], V tile [kTileKeys, hd], probabilities [qmax, kTileKeys], m, l and the rescale factor [qmax].
__host__ __device__ inline size_t smem_floats(int qmax, int hd) {
  return static_cast<size_t>(qmax) * hd + static_cast<size_t>(kTileKeys) * (hd + 1) +
         static_cast<size_t>(kTileKeys) * hd + static_cast<size_t>(qmax) * kTileKeys + 3 * static_cast<size_t>(qmax);
}

/// The largest smem_floats() any launch asks for (qmax * hd <= kQueryElems, qmax <= kMaxQueries).
constexpr size_t kMaxSmemBytes =
    sizeof(float) * (kQueryElems + kTileKeys * (kMaxHeadDim + 1) + kTileKeys * kMaxHeadDim + kMaxQueries * kTileKeys +
                     3 * kMaxQueries);

int kv_group_of(const AttentionParams& p) {
  return p.kv_group > 0 ? p.kv_group : (p.num_kv_heads > 0 ? p.num_heads / p.num_kv_heads : 0);
}

template <typename T>
__global__ void __launch_bounds__(kThreads) attention_cascade_kernel(AttentionParams p, int rows_per_block) {
  using Raw = typename Pack4<T>::Raw;
  extern __shared__ float smem[];
  __shared__ int row_slot[kMaxRows], row_len[kMaxRows], row_pos[kMaxRows], members[kMaxRows];
  __shared__ int n_members, group_slot, group_len;

  griddep_wait();  // q comes from the previous kernel; every block waits before exit
  griddep_launch_dependents();
  const int hd = p.head_dim, kvh = blockIdx.y, split = blockIdx.z;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int row0 = blockIdx.x * rows_per_block;
  const int rows = min(rows_per_block, p.n - row0);
  const int group = p.kv_group > 0 ? p.kv_group : p.num_heads / p.num_kv_heads;
  const int h0 = max(0, kvh * group - p.head_offset);  // the query heads h with attention_kv_head(h) == kvh
  const int nh = min(p.num_heads, (kvh + 1) * group - p.head_offset) - h0;
  const int qmax = rows_per_block * group;
  float* q_s = smem;                         // [qmax, hd], scaled (and rotated)
  float* k_s = q_s + qmax * hd;              // [kTileKeys, hd + 1]
  float* v_s = k_s + kTileKeys * (hd + 1);   // [kTileKeys, hd]
  float* p_s = v_s + kTileKeys * hd;         // [qmax, kTileKeys]
  float* m_s = p_s + qmax * kTileKeys;       // [qmax]
  float* l_s = m_s + qmax;                   // [qmax]
  float* c_s = l_s + qmax;                   // [qmax] rescale of the accumulators by this tile

  for (int i = tid; i < rows; i += kThreads) {
    const int t = row0 + i;
    row_len[i] = p.prefix_lens[t];
    row_slot[i] = p.prefix_slots[t];
    row_pos[i] = p.positions[t];
  }
  __syncthreads();
  const int cache_rows = attention_cache_rows(p);
  const int vec = hd / 4;
  const int half = p.rotary_ndims / 2;
  uint64_t done = 0;  // thread 0: rows already served
  for (;;) {
    if (tid == 0) {  // the next group: the first row not served yet, and every row with its prefix
      int cnt = 0, gs = -1, gl = 0;
      for (int i = 0; i < rows; ++i) {
        if (((done >> i) & 1u) || row_len[i] <= 0) continue;
        if (cnt == 0) {
          gs = row_slot[i];
          gl = row_len[i];
        }
        if (row_slot[i] == gs && row_len[i] == gl) {
          members[cnt++] = i;
          done |= uint64_t{1} << i;
        }
      }
      n_members = cnt;
      group_slot = gs;
      group_len = gl;
    }
    __syncthreads();
    const int cnt = n_members, plen = group_len;
    if (cnt == 0) break;  // uniform over the block
    const int splits = attention_cascade_splits(plen, p.cascade_max_splits);
    if (split < splits) {  // uniform
      const int nq = cnt * nh;
      const int kb = attention_split_begin(plen, splits, split), ke = attention_split_begin(plen, splits, split + 1);
      for (int e = tid; e < nq * hd; e += kThreads) {  // q exactly as the decode kernel stages it
        const int qi = e / hd, d = e - qi * hd;
        const int mi = qi / nh, h = h0 + (qi - mi * nh);
        const T* qh = static_cast<const T*>(p.q) + static_cast<int64_t>(row0 + members[mi]) * p.q_stride +
                      static_cast<int64_t>(h) * hd;
        q_s[e] = (p.rotary_append ? rotated(qh, d, half, p.rotary_ndims, static_cast<float>(row_pos[members[mi]]),
                                            p.inv_freq, p.rotary_attention_factor)
                                  : to_f32(qh[d])) *
                 p.scale;
      }
      for (int qi = tid; qi < nq; qi += kThreads) {
        m_s[qi] = -INFINITY;
        l_s[qi] = 0.f;
      }
      float acc[kAccPerThread];
#pragma unroll
      for (int i = 0; i < kAccPerThread; ++i) acc[i] = 0.f;
      const int64_t base = (static_cast<int64_t>(group_slot) * p.num_kv_heads + kvh) * cache_rows * hd;
      const T* kc = static_cast<const T*>(p.k_cache) + base;
      const T* vc = static_cast<const T*>(p.v_cache) + base;
      for (int j0 = kb; j0 < ke; j0 += kTileKeys) {
        const int tk = min(kTileKeys, ke - j0);
        __syncthreads();  // q_s, m_s ready; the previous tile's k_s / v_s / p_s / c_s consumed
        // 1. the tile into shared memory: every load issued before any is stored
        Raw kr[kLoads], vr[kLoads];
#pragma unroll
        for (int u = 0; u < kLoads; ++u) {
          const int idx = tid + u * kThreads;
          kr[u] = Raw{};
          vr[u] = Raw{};
          if (idx < tk * vec) {
            const int k = idx / vec, c = idx - k * vec;
            const int64_t at = kv_row(j0 + k, cache_rows) * hd + 4 * c;
            kr[u] = *reinterpret_cast<const Raw*>(kc + at);
            vr[u] = *reinterpret_cast<const Raw*>(vc + at);
          }
        }
#pragma unroll
        for (int u = 0; u < kLoads; ++u) {
          const int idx = tid + u * kThreads;
          if (idx < tk * vec) {
            const int k = idx / vec, c = idx - k * vec;
            float kf[4], vf[4];
            unpack4<T>(kr[u], kf);
            unpack4<T>(vr[u], vf);
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              k_s[k * (hd + 1) + 4 * c + e] = kf[e];
              v_s[k * hd + 4 * c + e] = vf[e];
            }
          }
        }
        __syncthreads();
        // 2. scores and the online softmax state, one warp per query, lane k = key j0 + k
        for (int qi = warp; qi < nq; qi += kWarps) {
          float s = -INFINITY;
          if (lane < tk) {
            const float* qr = q_s + qi * hd;
            const float* kr_s = k_s + lane * (hd + 1);
            float dot = 0.f;
            for (int d = 0; d < hd; ++d) dot += qr[d] * kr_s[d];
            s = attention_softcap(dot, p.softcap);
          }
          const float m_old = m_s[qi];
          const float m_new = fmaxf(m_old, warp_max(s));  // finite: every tile holds a key
          const float pk = lane < tk ? __expf(s - m_new) : 0.f;
          const float sum = warp_sum(pk);
          p_s[qi * kTileKeys + lane] = pk;
          __syncwarp();
          if (lane == 0) {
            const float corr = __expf(m_old - m_new);  // m_old = -inf before the first tile: 0
            c_s[qi] = corr;
            l_s[qi] = l_s[qi] * corr + sum;
            m_s[qi] = m_new;
          }
        }
        __syncthreads();
        // 3. the accumulators
#pragma unroll
        for (int i = 0; i < kAccPerThread; ++i) {
          const int e = tid + i * kThreads;
          if (e < nq * hd) {
            const int qi = e / hd, d = e - qi * hd;
            const float* pr = p_s + qi * kTileKeys;
            float a = acc[i] * c_s[qi];
            for (int k = 0; k < tk; ++k) a += pr[k] * v_s[k * hd + d];
            acc[i] = a;
          }
        }
      }
      // 4. the partial state [acc, m, l] of each (row, head) for this split
#pragma unroll
      for (int i = 0; i < kAccPerThread; ++i) {
        const int e = tid + i * kThreads;
        if (e < nq * hd) {
          const int qi = e / hd, d = e - qi * hd;
          const int mi = qi / nh, h = h0 + (qi - mi * nh);
          const int64_t t = row0 + members[mi];
          float* part = p.cascade_partial + ((t * p.num_heads + h) * p.cascade_max_splits + split) * (hd + 2);
          part[d] = acc[i];
          if (d == 0) {
            part[hd] = m_s[qi];
            part[hd + 1] = l_s[qi];
          }
        }
      }
    }
    __syncthreads();  // members / n_members / m_s are rewritten for the next group
  }
}

}  // namespace

int attention_cascade_seqs_per_block(const AttentionParams& p) {
  const int group = kv_group_of(p);
  if (group <= 0 || p.head_dim <= 0) return 0;
  return std::min({kMaxRows, kMaxQueries / group, kQueryElems / (group * p.head_dim)});
}

bool attention_cascade_supported(const AttentionParams& p) {
  return p.cascade_partial && p.prefix_slots && p.prefix_lens && p.cascade_max_splits >= 1 && p.window == 0 &&
         attention_decode_supported(p) && attention_cascade_seqs_per_block(p) >= 1;
}

void attention_cascade_prefix(const AttentionParams& p, cudaStream_t stream) {
  if (p.n == 0) return;
  attention_validate(p);
  TPS_CHECK(attention_cascade_supported(p),
            "kernels/attention_cascade: not a cascade shape (cascade_partial / prefix arrays missing, a local window, "
            "head_dim " + std::to_string(p.head_dim) + " or " + std::to_string(kv_group_of(p)) +
                " query heads per KV head)",
            "call attention(), which attends the prefix in the decode kernel for such shapes");
  TPS_CHECK(static_cast<int64_t>(p.max_seq_len) * p.cascade_max_splits < (int64_t{1} << 32),
            "kernels/attention_cascade: max_seq_len " + std::to_string(p.max_seq_len) + " x cascade_max_splits " +
                std::to_string(p.cascade_max_splits) + " does not fit the kernel's 32-bit key ranges",
            "use fewer cascade splits or a shorter max_seq_len");
  const int rows = attention_cascade_seqs_per_block(p);
  const size_t smem = sizeof(float) * smem_floats(rows * kv_group_of(p), p.head_dim);
  const dim3 grid((p.n + rows - 1) / rows, p.num_kv_heads, p.cascade_max_splits);
  cudaError_t e = cudaSuccess;
  TPS_DISPATCH_DTYPE(p.dtype, T, e = allow_dynamic_smem<attention_cascade_kernel<T>>(static_cast<int>(kMaxSmemBytes)));
  if (e != cudaSuccess)
    throw Error(std::string("kernels/attention_cascade: shared memory limit: ") + cudaGetErrorString(e),
                "check the device (compute capability 8.0 or newer gives 163 KiB or more per block)");
  TPS_DISPATCH_DTYPE(p.dtype, T, launch_pdl(attention_cascade_kernel<T>, grid, dim3(kThreads), smem, stream, p, rows));
  check_launch("attention_cascade_kernel");
}

}  // namespace tpshard::cuda
