// moe_block.cu: the mixture-of-experts MLP of one rank (see moe_block.cuh).
#include "kernels/moe_block.cuh"

#include <string>
#include <vector>

#include "format/error.h"
#include "kernels/linear.cuh"
#include "kernels/moe.cuh"

namespace tpshard::cuda {
namespace {

void check_cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess)
    throw Error(std::string("kernels/moe_block: ") + what + " failed: " + cudaGetErrorString(e),
                "run with CUDA_LAUNCH_BLOCKING=1 to find the faulting kernel");
}

const char* at_row(const void* base, int64_t row, int width, DType dtype) {
  return static_cast<const char*>(base) + row * width * static_cast<int64_t>(dtype_size(dtype));
}

/// Expert e's gated MLP over the n rows of x into y [n, hidden], through a.ws.act (and a.ws.ffn).
/// count (device, may be null): the expert's routed entries; the decode GEMVs skip the expert at 0.
void expert_mlp(const MoeBlockArgs& a, int e, const void* x, int n, void* y, const int32_t* count, Gemm& gemm,
                cudaStream_t stream) {
  GemvArgs up;
  up.x = x;
  up.w = at_row(a.gate_up_w, static_cast<int64_t>(e) * 2 * a.inter, a.hidden, a.dtype);
  up.y = a.ws.act;
  up.n = n;
  up.out = a.inter;
  up.in = a.hidden;
  up.dtype = up.out_dtype = a.dtype;
  up.epilogue = GemvEpilogue::GatedAct;
  up.act = a.act;
  up.tuning = a.tuning;
  up.skip_if_zero = count;
  linear(up, gemm, a.ws.ffn, /*use_gemv=*/true, stream);
  GemvArgs down;
  down.x = a.ws.act;
  down.w = at_row(a.down_w, static_cast<int64_t>(e) * a.hidden, a.inter, a.dtype);
  down.y = y;
  down.n = n;
  down.out = a.hidden;
  down.in = a.inter;
  down.dtype = down.out_dtype = a.dtype;
  down.tuning = a.tuning;
  down.skip_if_zero = count;
  linear(down, gemm, nullptr, /*use_gemv=*/true, stream);
}

}  // namespace

void moe_block(const MoeBlockArgs& a, Gemm& gemm, cudaStream_t stream) {
  TPS_CHECK(a.experts >= 1 && a.experts <= kMoeMaxExperts && a.top_k >= 1 && a.top_k <= a.experts && a.hidden % 8 == 0 &&
                a.inter >= 1,
            "kernels/moe_block: " + std::to_string(a.experts) + " experts, top_k " + std::to_string(a.top_k) +
                ", hidden " + std::to_string(a.hidden) + ", inter " + std::to_string(a.inter) + " are not supported",
            "experts 1.." + std::to_string(kMoeMaxExperts) + ", top_k <= experts, hidden a multiple of 8");
  if (a.n <= 0) return;
  const int K = a.top_k, E = a.experts;
  GemvArgs router;  // replicated on every rank: every rank routes alike
  router.x = a.x;
  router.w = a.router_w;
  router.y = a.ws.router_logits;
  router.n = a.n;
  router.out = E;
  router.in = a.hidden;
  router.dtype = a.dtype;
  router.out_dtype = DType::F32;
  router.tuning = a.tuning;
  linear(router, gemm, nullptr, /*use_gemv=*/true, stream);
  moe_route(a.ws.router_logits, a.n, E, K, a.ws.ids, a.ws.weights, stream);

  const int entries = a.n * K;
  int32_t* counts = a.ws.offsets + E + 1;
  moe_permute(a.ws.ids, entries, E, a.ws.offsets, counts, a.ws.slots, stream);
  if (!a.exact_rows) {  // every expert over all n tokens, the routed rows added in expert order
    check_cuda(cudaMemsetAsync(a.ws.acc, 0, static_cast<size_t>(a.n) * a.hidden * sizeof(float), stream), "memset");
    for (int e = 0; e < E; ++e) {  // the decode GEMVs (n <= 2) skip experts without tokens on the device
      expert_mlp(a, e, a.x, a.n, a.ws.expert_out, counts + e, gemm, stream);
      moe_accumulate(e, a.ws.expert_out, a.ws.ids, a.ws.weights, a.n, K, a.hidden, a.dtype, a.ws.acc, stream);
    }
    moe_store(a.ws.acc, static_cast<int64_t>(a.n) * a.hidden, a.dtype, a.out, stream);
    return;
  }
  moe_gather(a.x, a.ws.slots, a.n, K, a.hidden, a.dtype, a.ws.gathered, stream);
  const size_t offset_bytes = (2 * static_cast<size_t>(E) + 1) * sizeof(int32_t);
  check_cuda(cudaMemcpyAsync(a.ws.offsets_host, a.ws.offsets, offset_bytes, cudaMemcpyDeviceToHost, stream),
             "copy of the experts' offsets");
  check_cuda(cudaStreamSynchronize(stream), "synchronization for the experts' offsets");
  const int32_t* off = a.ws.offsets_host;
  const int32_t* cnt = a.ws.offsets_host + E + 1;
  for (int e = 0; e < E; ++e) {
    if (cnt[e] == 0) continue;
    expert_mlp(a, e, at_row(a.ws.gathered, off[e], a.hidden, a.dtype), cnt[e],
               const_cast<char*>(at_row(a.ws.expert_out, off[e], a.hidden, a.dtype)), nullptr, gemm, stream);
  }
  moe_combine(a.ws.expert_out, a.ws.ids, a.ws.weights, a.ws.slots, a.n, K, a.hidden, a.dtype, a.out, stream);
}

}  // namespace tpshard::cuda
