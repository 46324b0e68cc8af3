// moe.cu: mixture-of-experts routing, permutation, gather and weighted sums (see moe.cuh).
#include <algorithm>
#include <climits>

#include "kernels/common.cuh"
#include "kernels/moe.cuh"
#include "model/moe_routing.h"

namespace tpshard::cuda {
namespace {

constexpr int kRouteWarps = 4;        // tokens per block of moe_route
constexpr int kPermuteThreads = 512;  // the one block of moe_permute

/// One warp per token; lane l holds experts l, l + 32, ... (bit i of `taken`: expert l + 32 i).
__global__ void moe_route_kernel(const float* logits, int n, int experts, int top_k, int32_t* ids, float* weights) {
  const int token = blockIdx.x * kRouteWarps + (threadIdx.x >> 5), lane = threadIdx.x & 31;
  if (token >= n) return;
  const float* l = logits + static_cast<int64_t>(token) * experts;
  float m = -INFINITY;
  for (int e = lane; e < experts; e += 32) m = fmaxf(m, l[e]);
  m = warp_max(m);
  float denom = 0.f;
  for (int e = lane; e < experts; e += 32) denom += expf(l[e] - m);
  denom = warp_sum(denom);
  uint32_t taken = 0;
  float picked = 0.f;
  int32_t* tid = ids + static_cast<int64_t>(token) * top_k;
  float* tw = weights + static_cast<int64_t>(token) * top_k;
  for (int j = 0; j < top_k; ++j) {
    float best_p = -1.f;
    int best = INT_MAX;
    for (int e = lane, i = 0; e < experts; e += 32, ++i) {
      if ((taken >> i) & 1u) continue;
      const float p = expf(l[e] - m) / denom;
      if (p > best_p) {  // ascending e: the lower id wins ties within the lane
        best_p = p;
        best = e;
      }
    }
    for (int o = 16; o > 0; o >>= 1) {
      const float op = __shfl_xor_sync(0xffffffffu, best_p, o);
      const int oe = __shfl_xor_sync(0xffffffffu, best, o);
      if (op > best_p || (op == best_p && oe < best)) {
        best_p = op;
        best = oe;
      }
    }
    if (lane == (best & 31)) taken |= 1u << (best >> 5);
    if (lane == 0) {
      tid[j] = best;
      tw[j] = best_p;
    }
    picked += best_p;  // the same on every lane, summed in j order as on the CPU
  }
  if (lane == 0)
    for (int j = 0; j < top_k; ++j) tw[j] = tw[j] / picked;
}

/// Counts in shared memory, the aligned prefix sums by thread 0, then slots chunk by chunk: an entry's
/// rank among the chunk's earlier entries of its expert plus the expert's fill cursor.
__global__ void moe_permute_kernel(const int32_t* ids, int entries, int experts, int32_t* offsets, int32_t* counts,
                                   int32_t* slots) {
  extern __shared__ int32_t sm[];
  int32_t* cnt = sm;
  int32_t* cursor = sm + experts;
  int32_t* chunk = sm + 2 * experts;
  const int t = threadIdx.x, bd = blockDim.x;
  for (int e = t; e < experts; e += bd) cnt[e] = 0;
  __syncthreads();
  for (int i = t; i < entries; i += bd) atomicAdd(&cnt[ids[i]], 1);
  __syncthreads();
  if (t == 0) {
    int run = 0;
    for (int e = 0; e < experts; ++e) {
      cursor[e] = run;
      offsets[e] = run;
      counts[e] = cnt[e];
      run += (cnt[e] + static_cast<int>(kMoeRowAlign) - 1) / static_cast<int>(kMoeRowAlign) * static_cast<int>(kMoeRowAlign);
    }
    offsets[experts] = run;
  }
  __syncthreads();
  for (int base = 0; base < entries; base += bd) {
    const int i = base + t;
    const int e = i < entries ? ids[i] : -1;
    chunk[t] = e;
    __syncthreads();
    if (e >= 0) {
      int r = 0;
      for (int j = 0; j < t; ++j) r += chunk[j] == e;
      slots[i] = cursor[e] + r;
    }
    __syncthreads();
    if (e >= 0) atomicAdd(&cursor[e], 1);
    __syncthreads();
  }
}

template <typename T>
__global__ void moe_gather_kernel(const T* x, const int32_t* slots, int top_k, int hidden, T* gathered) {
  const int entry = blockIdx.x;
  const T* src = x + static_cast<int64_t>(entry / top_k) * hidden;
  T* dst = gathered + static_cast<int64_t>(slots[entry]) * hidden;
  for (int h = threadIdx.x; h < hidden; h += blockDim.x) dst[h] = src[h];
}

/// One block per token; thread 0 orders the token's entries by expert id in shared memory.
template <typename T>
__global__ void moe_combine_kernel(const T* expert_out, const int32_t* ids, const float* weights, const int32_t* slots,
                                   int top_k, int hidden, T* out) {
  extern __shared__ int32_t order[];  // [top_k]: entry indices of the token in increasing expert id
  const int token = blockIdx.x;
  const int64_t first = static_cast<int64_t>(token) * top_k;
  if (threadIdx.x == 0) {
    for (int j = 0; j < top_k; ++j) order[j] = j;
    for (int j = 1; j < top_k; ++j)  // insertion sort: top_k is small
      for (int q = j; q > 0 && ids[first + order[q]] < ids[first + order[q - 1]]; --q) {
        const int s = order[q];
        order[q] = order[q - 1];
        order[q - 1] = s;
      }
  }
  __syncthreads();
  for (int h = threadIdx.x; h < hidden; h += blockDim.x) {
    float acc = 0.f;
    for (int j = 0; j < top_k; ++j) {
      const int64_t entry = first + order[j];
      acc = __fadd_rn(acc, __fmul_rn(weights[entry], to_f32(expert_out[static_cast<int64_t>(slots[entry]) * hidden + h])));
    }
    out[static_cast<int64_t>(token) * hidden + h] = from_f32<T>(acc);
  }
}

template <typename T>
__global__ void moe_accumulate_kernel(int expert, const T* y, const int32_t* ids, const float* weights, int n,
                                      int top_k, int hidden, float* acc) {
  const int64_t total = static_cast<int64_t>(n) * hidden;
  for (int64_t k = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; k < total;
       k += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t first = k / hidden * top_k;
    for (int j = 0; j < top_k; ++j)
      if (ids[first + j] == expert) {
        acc[k] = __fadd_rn(acc[k], __fmul_rn(weights[first + j], to_f32(y[k])));
        break;
      }
  }
}

template <typename T>
__global__ void moe_store_kernel(const float* acc, int64_t count, T* out) {
  for (int64_t k = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; k < count;
       k += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[k] = from_f32<T>(acc[k]);
}

int grid_for(int64_t total) { return static_cast<int>(std::min<int64_t>((total + 255) / 256, 65535)); }

}  // namespace

void moe_route(const float* logits, int n, int experts, int top_k, int32_t* ids, float* weights, cudaStream_t stream) {
  TPS_CHECK(experts >= 1 && experts <= kMoeMaxExperts && top_k >= 1 && top_k <= experts,
            "kernels/moe_route: " + std::to_string(experts) + " experts, top_k " + std::to_string(top_k) +
                " (need 1 <= top_k <= experts <= " + std::to_string(kMoeMaxExperts) + ")",
            "this is a bug in the caller");
  if (n <= 0) return;
  moe_route_kernel<<<(n + kRouteWarps - 1) / kRouteWarps, kRouteWarps * 32, 0, stream>>>(logits, n, experts, top_k, ids,
                                                                                        weights);
  check_launch("moe_route_kernel");
}

void moe_permute(const int32_t* ids, int entries, int experts, int32_t* offsets, int32_t* counts, int32_t* slots,
                 cudaStream_t stream) {
  TPS_CHECK(experts >= 1 && experts <= kMoeMaxExperts && entries >= 0,
            "kernels/moe_permute: " + std::to_string(experts) + " experts, " + std::to_string(entries) + " entries",
            "this is a bug in the caller");
  const size_t shared = (2 * static_cast<size_t>(experts) + kPermuteThreads) * sizeof(int32_t);
  moe_permute_kernel<<<1, kPermuteThreads, shared, stream>>>(ids, entries, experts, offsets, counts, slots);
  check_launch("moe_permute_kernel");
}

void moe_gather(const void* x, const int32_t* slots, int n, int top_k, int hidden, DType dtype, void* gathered,
                cudaStream_t stream) {
  if (n <= 0) return;
  TPS_DISPATCH_DTYPE(dtype, T,
                     moe_gather_kernel<T><<<n * top_k, 128, 0, stream>>>(static_cast<const T*>(x), slots, top_k, hidden,
                                                                        static_cast<T*>(gathered)));
  check_launch("moe_gather_kernel");
}

void moe_combine(const void* expert_out, const int32_t* ids, const float* weights, const int32_t* slots, int n,
                 int top_k, int hidden, DType dtype, void* out, cudaStream_t stream) {
  if (n <= 0) return;
  const size_t shared = static_cast<size_t>(top_k) * sizeof(int32_t);
  TPS_DISPATCH_DTYPE(dtype, T,
                     moe_combine_kernel<T><<<n, 256, shared, stream>>>(static_cast<const T*>(expert_out), ids, weights,
                                                                       slots, top_k, hidden, static_cast<T*>(out)));
  check_launch("moe_combine_kernel");
}

void moe_accumulate(int expert, const void* y, const int32_t* ids, const float* weights, int n, int top_k, int hidden,
                    DType dtype, float* acc, cudaStream_t stream) {
  const int64_t total = static_cast<int64_t>(n) * hidden;
  if (total <= 0) return;
  TPS_DISPATCH_DTYPE(dtype, T,
                     moe_accumulate_kernel<T><<<grid_for(total), 256, 0, stream>>>(expert, static_cast<const T*>(y), ids,
                                                                                   weights, n, top_k, hidden, acc));
  check_launch("moe_accumulate_kernel");
}

void moe_store(const float* acc, int64_t count, DType dtype, void* out, cudaStream_t stream) {
  if (count <= 0) return;
  TPS_DISPATCH_DTYPE(dtype, T, moe_store_kernel<T><<<grid_for(count), 256, 0, stream>>>(acc, count, static_cast<T*>(out)));
  check_launch("moe_store_kernel");
}

}  // namespace tpshard::cuda
