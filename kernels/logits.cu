// logits.cu: vocab-parallel argmax and last-token row gather (see logits.cuh).
#include "kernels/common.cuh"
#include "kernels/logits.cuh"
#include "kernels/pdl.cuh"

namespace tpshard::cuda {
namespace {

__device__ __forceinline__ bool better(float v, int64_t i, float bv, int64_t bi) {
  return v > bv || (v == bv && i < bi);
}

/// Grid (n, splits): block (t, b) takes the b-th of `splits` equal column ranges of row t.
__global__ void argmax_kernel(ArgmaxParams p) {
  __shared__ float sv[32];
  __shared__ int64_t si[32];
  griddep_wait();
  griddep_launch_dependents();
  const int t = blockIdx.x, split = blockIdx.y;
  const float* row = p.logits + static_cast<int64_t>(t) * p.vocab_per_rank;
  int64_t valid = p.vocab_size - p.vocab_begin;
  valid = valid < 0 ? 0 : (valid > p.vocab_per_rank ? p.vocab_per_rank : valid);
  const int64_t per = (valid + p.splits - 1) / p.splits;
  const int64_t begin = min(valid, split * per), end = min(valid, begin + per);
  float bv = -INFINITY;
  int64_t bi = INT64_MAX;
  // kUnroll loads in flight per thread (one row is 50k+ floats for one block: latency-bound otherwise)
  constexpr int kUnroll = 8;
  for (int64_t i0 = begin + threadIdx.x; i0 < end; i0 += kUnroll * static_cast<int64_t>(blockDim.x)) {
    float v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t i = i0 + u * static_cast<int64_t>(blockDim.x);
      v[u] = i < end ? row[i] : -INFINITY;
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t i = i0 + u * static_cast<int64_t>(blockDim.x);
      if (i < end && better(v[u], i, bv, bi)) { bv = v[u]; bi = i; }  // NaN compares false: never taken
    }
  }
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
    const int64_t oi = __shfl_xor_sync(0xffffffffu, bi, o);
    if (better(ov, oi, bv, bi)) { bv = ov; bi = oi; }
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) { sv[warp] = bv; si[warp] = bi; }
  __syncthreads();
  if (threadIdx.x != 0) return;
  for (int w = 1; w < static_cast<int>(blockDim.x >> 5); ++w)
    if (better(sv[w], si[w], bv, bi)) { bv = sv[w]; bi = si[w]; }
  ArgmaxPair r{bv, bi == INT64_MAX ? -1 : static_cast<int32_t>(bi + p.vocab_begin)};
  if (p.splits > 1) {
    // leave this range's pair; the last block of the row merges all of them (in any order: the
    // largest value, lowest id on ties, is one answer)
    p.partial[static_cast<int64_t>(t) * p.splits + split] = r;
    __threadfence();
    if (atomicAdd(p.counters + t, 1) != p.splits - 1) return;
    __threadfence();
    r = ArgmaxPair{-INFINITY, -1};
    for (int b = 0; b < p.splits; ++b) {  // L2 reads: other blocks wrote them
      const float2 raw = __ldcg(reinterpret_cast<const float2*>(p.partial + static_cast<int64_t>(t) * p.splits + b));
      const ArgmaxPair c{raw.x, __float_as_int(raw.y)};
      if (c.index < 0) continue;
      if (r.index < 0 || c.value > r.value || (c.value == r.value && c.index < r.index)) r = c;
    }
    p.counters[t] = 0;  // zero again for the next call (CUDA graph replays)
  }
  p.out[t] = r;
}

template <typename T>
__global__ void gather_rows_kernel(const T* src, T* dst, const int32_t* rows, int width) {
  griddep_wait();
  griddep_launch_dependents();
  const int64_t r = rows[blockIdx.x];
  for (int i = threadIdx.x; i < width; i += blockDim.x)
    dst[static_cast<int64_t>(blockIdx.x) * width + i] = src[r * width + i];
}

__global__ void argmax_merge_advance_kernel(ArgmaxAdvanceParams p) {
  griddep_wait();
  griddep_launch_dependents();
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= p.n) return;
  float bv = -INFINITY;
  int32_t bi = -1;
  for (int r = 0; r < p.tp_size; ++r) {
    const ArgmaxPair c = p.pairs[static_cast<int64_t>(r) * p.n + t];
    if (c.index < 0) continue;
    if (bi < 0 || c.value > bv || (c.value == bv && c.index < bi)) { bv = c.value; bi = c.index; }
  }
  const int32_t id = bi < 0 ? 0 : bi;
  p.ids[t] = id;
  if (p.tokens && p.slots[t] != p.skip_slot && p.positions[t] + 1 < p.max_seq_len) {
    p.tokens[t] = id;
    p.positions[t] += 1;
  }
}

}  // namespace

void argmax_merge_advance(const ArgmaxAdvanceParams& p, cudaStream_t stream) {
  if (p.n == 0) return;
  const int threads = p.n < 128 ? ((p.n + 31) / 32) * 32 : 128;
  launch_pdl(argmax_merge_advance_kernel, dim3((p.n + threads - 1) / threads), dim3(threads), 0, stream, p);
  check_launch("argmax_merge_advance_kernel");
}

int argmax_splits(int n, int64_t vocab_per_rank) {
  if (n > 8) return 1;
  const int64_t s = (vocab_per_rank + 2047) / 2048;
  return static_cast<int>(s < 1 ? 1 : (s > kArgmaxMaxSplits ? kArgmaxMaxSplits : s));
}

void vocab_argmax(const ArgmaxParams& p, cudaStream_t stream) {
  TPS_CHECK(p.splits >= 1 && p.splits <= kArgmaxMaxSplits && (p.splits == 1 || (p.partial && p.counters)),
            "kernels/vocab_argmax: splits " + std::to_string(p.splits) + " (partial " + (p.partial ? "set" : "null") +
                ", counters " + (p.counters ? "set" : "null") + ")",
            "use 1..kArgmaxMaxSplits splits, and give partial [n, splits] and zeroed counters [n] when splits > 1");
  if (p.n == 0) return;
  // one block of 1024 threads per row, or `splits` blocks of 256 per row
  launch_pdl(argmax_kernel, dim3(p.n, p.splits), dim3(p.splits > 1 ? 256 : 1024), 0, stream, p);
  check_launch("argmax_kernel");
}

void merge_argmax(const ArgmaxPair* gathered, int tp_size, int n, int32_t* out) {
  for (int t = 0; t < n; ++t) {
    float bv = -INFINITY;
    int32_t bi = -1;
    for (int r = 0; r < tp_size; ++r) {
      const ArgmaxPair& c = gathered[static_cast<size_t>(r) * n + t];
      if (c.index < 0) continue;
      if (bi < 0 || c.value > bv || (c.value == bv && c.index < bi)) { bv = c.value; bi = c.index; }
    }
    out[t] = bi < 0 ? 0 : bi;
  }
}

void gather_rows(const void* src, void* dst, const int32_t* rows, int n_rows, int width, DType dtype,
                 cudaStream_t stream) {
  if (n_rows == 0) return;
  TPS_DISPATCH_DTYPE(dtype, T,
                     launch_pdl(gather_rows_kernel<T>, dim3(n_rows), dim3(256), 0, stream,
                                                static_cast<const T*>(src), static_cast<T*>(dst), rows, width));
  check_launch("gather_rows_kernel");
}

}  // namespace tpshard::cuda
