// bench_kernels: time the decode-path building blocks on H200-class GPUs, so that the generation
// benchmark's step times can be explained by measurement:
//   0. (gemv_sweep.cpp) the GEMV's weight-streaming tunings on whole decode layers;
//   1. every linear layer of Pythia-1.4B (fp16) and Llama-7B (bf16, tp 1 and tp 2 shards) at 1 and 4
//      tokens, through the decode GEMV and through cuBLASLt + the separate epilogue kernels; weights
//      rotate over enough copies (>= 512 MiB) that L2 never holds them; calls are captured in a CUDA
//      graph back to back, as in a decode step;
//   2. the other kernels of a batch-1 decode layer (add_norm, argmax), each in a graph of 64 back-to-back
//      calls; then decode attention with fused rotary + kv_cache append and in-kernel split merge, the
//      tiled kernel next to the decode kernel, batch 1 and 48, contexts 32..4096;
//   2b. (--only prefill) prefill attention: the tiled kernel vs the tensor-core prefill kernel on
//      1,024-token steps of packed prompts (NeoX-20B, Llama-7B shapes);
//   3. (>= 2 GPUs) all_reduce latency of decode-sized messages, custom one-shot vs NCCL, 64 calls per
//      graph, both ranks replaying together.
// Usage: bench_kernels [--only linear|gemv_sweep|pieces|prefill|all_reduce]. Prints markdown tables; the copy bandwidth it
// compares against is a device-to-device cudaMemcpy (read + write bytes / s) of 1 GiB.
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "format/error.h"
#include "kernels/attention.cuh"
#include "kernels/attention_decode.cuh"
#include "kernels/attention_prefill.cuh"
#include "kernels/linear.cuh"
#include "runtime/query_tiles.h"
#include "kernels/logits.cuh"
#include "kernels/norm.cuh"
#include "runtime/cuda/check.h"
#include "runtime/cuda/custom_all_reduce.h"
#include "runtime/cuda/nccl_comm.h"
#include "tools/bench_kernels/gemv_sweep.h"
#include "tools/bench_kernels/graph_timer.h"
#include "tools/copy_bandwidth.h"

using namespace tpshard;
using namespace tpshard::cuda;

namespace {

struct Shape {
  const char* model;
  const char* layer;
  int out, in;
  DType dtype;
  GemvEpilogue epilogue;
  Activation act;
  bool bias;
  float beta;
  DType out_dtype;
};

void bench_linear() {
  TPS_CUDA_CHECK(cudaSetDevice(0));
  const double bw = device_copy_gbps();
  const auto F16 = DType::F16, BF16 = DType::BF16, F32 = DType::F32;
  const auto None = GemvEpilogue::None, Act = GemvEpilogue::Act, Gated = GemvEpilogue::GatedAct;
  const std::vector<Shape> shapes = {
      {"pythia-1.4b", "qkv (+bias)", 6144, 2048, F16, None, Activation::Gelu, true, 0.f, F16},
      {"pythia-1.4b", "attn out", 2048, 2048, F16, None, Activation::Gelu, false, 0.f, F16},
      {"pythia-1.4b", "mlp up (+bias, gelu)", 8192, 2048, F16, Act, Activation::Gelu, true, 0.f, F16},
      {"pythia-1.4b", "mlp down (beta 1)", 2048, 8192, F16, None, Activation::Gelu, false, 1.f, F16},
      {"pythia-1.4b", "lm head (f32 out)", 50304, 2048, F16, None, Activation::Gelu, false, 0.f, F32},
      {"llama-7b tp1", "qkv", 12288, 4096, BF16, None, Activation::Silu, false, 0.f, BF16},
      {"llama-7b tp1", "attn out", 4096, 4096, BF16, None, Activation::Silu, false, 0.f, BF16},
      {"llama-7b tp1", "gate_up (silu)", 11008, 4096, BF16, Gated, Activation::Silu, false, 0.f, BF16},
      {"llama-7b tp1", "down", 4096, 11008, BF16, None, Activation::Silu, false, 0.f, BF16},
      {"llama-7b tp1", "lm head (f32 out)", 32000, 4096, BF16, None, Activation::Silu, false, 0.f, F32},
      {"llama-7b tp2", "qkv", 6144, 4096, BF16, None, Activation::Silu, false, 0.f, BF16},
      {"llama-7b tp2", "attn out", 4096, 2048, BF16, None, Activation::Silu, false, 0.f, BF16},
      {"llama-7b tp2", "gate_up (silu)", 5504, 4096, BF16, Gated, Activation::Silu, false, 0.f, BF16},
      {"llama-7b tp2", "down", 4096, 5504, BF16, None, Activation::Silu, false, 0.f, BF16},
      {"llama-7b tp2", "lm head (f32 out)", 16000, 4096, BF16, None, Activation::Silu, false, 0.f, F32},
  };
  cudaStream_t s = nullptr;
  TPS_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  Gemm gemm;
  std::printf("\n## Linear layers (GPU 0; copy bandwidth %.0f GB/s)\n\n", bw);
  std::printf("| model | layer | tokens | weight MiB | cuBLASLt + epilogue us | GB/s | %% of copy BW | gemv us | GB/s | %% of copy BW | speedup |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const Shape& sh : shapes) {
    const int rows = sh.epilogue == Gated ? 2 * sh.out : sh.out;
    const size_t es = dtype_size(sh.dtype);
    const size_t wbytes = static_cast<size_t>(rows) * sh.in * es;
    const int copies = static_cast<int>(std::max<size_t>(2, (512ull << 20) / wbytes + 1));
    void* w = nullptr;
    TPS_CUDA_CHECK(cudaMalloc(&w, wbytes * copies));
    TPS_CUDA_CHECK(cudaMemset(w, 0, wbytes * copies));  // zeros: finite everywhere
    for (int n : {1, 4}) {
      void *x = nullptr, *y = nullptr, *bias = nullptr, *scratch = nullptr;
      TPS_CUDA_CHECK(cudaMalloc(&x, static_cast<size_t>(n) * sh.in * es));
      TPS_CUDA_CHECK(cudaMemset(x, 0, static_cast<size_t>(n) * sh.in * es));
      TPS_CUDA_CHECK(cudaMalloc(&y, static_cast<size_t>(n) * sh.out * 4));
      TPS_CUDA_CHECK(cudaMemset(y, 0, static_cast<size_t>(n) * sh.out * 4));
      TPS_CUDA_CHECK(cudaMalloc(&bias, rows * es));
      TPS_CUDA_CHECK(cudaMemset(bias, 0, rows * es));
      TPS_CUDA_CHECK(cudaMalloc(&scratch, static_cast<size_t>(n) * rows * es));
      double us[2];
      for (int use_gemv = 0; use_gemv < 2; ++use_gemv) {
        const int calls = std::max(copies, 24);
        us[use_gemv] = time_graph_us(s, calls, 10, [&](int i) {
          GemvArgs a;
          a.x = x;
          a.w = static_cast<const char*>(w) + (i % copies) * wbytes;
          a.y = y;
          a.bias = sh.bias ? bias : nullptr;
          a.n = n;
          a.out = sh.out;
          a.in = sh.in;
          a.dtype = sh.dtype;
          a.out_dtype = sh.out_dtype;
          a.beta = sh.beta;
          a.epilogue = sh.epilogue;
          a.act = sh.act;
          if (use_gemv == 1) {
            gemv(a, s);  // the GEMV itself at every n (linear() takes it only up to kLinearGemvMaxTokens)
          } else {
            linear(a, gemm, scratch, false, s);
          }
        });
      }
      auto gbps = [&](double u) { return wbytes / (u * 1e-6) / 1e9; };
      std::printf("| %s | %s | %d | %.1f | %.2f | %.0f | %.0f%% | %.2f | %.0f | %.0f%% | %.2fx |\n", sh.model, sh.layer, n,
                  wbytes / 1048576.0, us[0], gbps(us[0]), 100 * gbps(us[0]) / bw, us[1], gbps(us[1]),
                  100 * gbps(us[1]) / bw, us[0] / us[1]);
      std::fflush(stdout);
      cudaFree(x);
      cudaFree(y);
      cudaFree(bias);
      cudaFree(scratch);
    }
    cudaFree(w);
  }
  cudaStreamDestroy(s);
}

/// A zeroed device allocation of `bytes` (the benchmarks free it with cudaFree).
void* device_zeros(size_t bytes) {
  void* p = nullptr;
  TPS_CUDA_CHECK(cudaMalloc(&p, bytes));
  TPS_CUDA_CHECK(cudaMemset(p, 0, bytes));
  return p;
}

/// Decode attention with rotary + kv_cache append + split merge fused, as the transformer launches it:
/// the tiled kernel (attention_tiled) next to the decode kernel, same inputs. All tokens
/// of a batch at the same context, each in its own kv_cache slot; num_splits as attention_num_splits
/// picks it for max_seq_len = max(160, context) (the decode kernel may use fewer, see
/// attention_decode_splits).
void bench_attention_decode(cudaStream_t s) {
  std::printf("\n## Decode attention: tiled kernel vs decode kernel (us per call, 64 calls per graph)\n\n");
  std::printf("| model shape | batch | context | splits (decode kernel uses) | tiled us | decode us | speedup |\n");
  std::printf("|---|---|---|---|---|---|---|\n");
  struct AttnCase { const char* what; int heads, hd, rot; DType t; };
  for (const AttnCase& c : {AttnCase{"pythia-1.4b: 16 heads, hd 128, rotary 32, f16", 16, 128, 32, DType::F16},
                            AttnCase{"llama-7b tp1: 32 heads, hd 128, bf16", 32, 128, 128, DType::BF16},
                            AttnCase{"llama-7b tp2: 16 heads, hd 128, bf16", 16, 128, 128, DType::BF16}}) {
    for (int n : {1, 48}) {
      for (int ctx : {32, 100, 160, 1000, 4096}) {
        const int max_seq = std::max(160, ctx), slots = n + 1;
        const int64_t stride = static_cast<int64_t>(3 * c.heads) * c.hd;
        const size_t cache_bytes = static_cast<size_t>(slots) * c.heads * max_seq * c.hd * 2;
        void* qkv = device_zeros(n * stride * 2);
        void* kc = device_zeros(cache_bytes);
        void* vc = device_zeros(cache_bytes);
        std::vector<int32_t> meta_h(2 * n);
        for (int i = 0; i < n; ++i) {
          meta_h[i] = i + 1;            // slot
          meta_h[n + i] = ctx - 1;      // position
        }
        int32_t* meta = static_cast<int32_t*>(device_zeros(meta_h.size() * 4));
        TPS_CUDA_CHECK(cudaMemcpy(meta, meta_h.data(), meta_h.size() * 4, cudaMemcpyHostToDevice));
        std::vector<float> inv(c.rot / 2);
        for (int i = 0; i < c.rot / 2; ++i) inv[i] = static_cast<float>(std::pow(10000.0, -2.0 * i / c.rot));
        float* d_inv = static_cast<float*>(device_zeros(inv.size() * 4));
        TPS_CUDA_CHECK(cudaMemcpy(d_inv, inv.data(), inv.size() * 4, cudaMemcpyHostToDevice));
        const int splits = attention_num_splits(n, c.heads, max_seq, 16);
        float* partial = static_cast<float*>(device_zeros(static_cast<size_t>(n) * c.heads * 16 * (c.hd + 2) * 4));
        int* counters = static_cast<int*>(device_zeros(static_cast<size_t>(n) * c.heads * 4));
        void* out = device_zeros(static_cast<size_t>(n) * c.heads * c.hd * 2);
        AttentionParams a;
        a.q = qkv;
        a.q_stride = stride;
        a.k_cache = kc;
        a.v_cache = vc;
        a.slots = meta;
        a.positions = meta + n;
        a.out = out;
        a.partial = partial;
        a.split_counters = counters;
        a.dtype = c.t;
        a.n = n;
        a.num_heads = c.heads;
        a.num_kv_heads = c.heads;
        a.head_dim = c.hd;
        a.max_seq_len = max_seq;
        a.num_splits = splits;
        a.scale = 0.088f;
        a.decode = true;
        a.rotary_append = true;
        a.inv_freq = d_inv;
        a.rotary_ndims = c.rot;
        const double tiled = time_graph_us(s, 64, 20, [&](int) { attention_tiled(a, s); });
        const double decode = time_graph_us(s, 64, 20, [&](int) { attention_decode(a, s); });
        std::printf("| %s | %d | %d | %d (%d) | %.2f | %.2f | %.2fx |\n", c.what, n, ctx, splits,
                    attention_decode_splits(ctx, splits), tiled, decode, tiled / decode);
        for (void* p : {qkv, kc, vc, static_cast<void*>(meta), static_cast<void*>(d_inv), static_cast<void*>(partial),
                        static_cast<void*>(counters), out})
          cudaFree(p);
      }
    }
  }
}

/// Batch-1 decode: the non-GEMM kernels of one layer, as the transformer launches them.
void bench_pieces() {
  TPS_CUDA_CHECK(cudaSetDevice(0));
  cudaStream_t s = nullptr;
  TPS_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  std::printf("\n## Other decode kernels, batch 1 (GPU 0; us per call, 64 calls per graph)\n\n");
  std::printf("| kernel | shape | us |\n|---|---|---|\n");
  struct NormCase { const char* what; int hidden; NormKind kind; bool two; DType t; };
  for (const NormCase& c : {NormCase{"LayerNorm, two outputs (pythia parallel residual)", 2048, NormKind::LayerNorm, true, DType::F16},
                            NormCase{"RMSNorm (llama-7b)", 4096, NormKind::RmsNorm, false, DType::BF16}}) {
    void* res = device_zeros(c.hidden * 4);
    void* add = device_zeros(c.hidden * 2);
    void* w = device_zeros(c.hidden * 2);
    void* o0 = device_zeros(c.hidden * 2);
    void* o1 = device_zeros(c.hidden * 2);
    const double us = time_graph_us(s, 64, 20, [&](int) {
      AddNormParams p;
      p.residual = static_cast<float*>(res);
      p.add0 = add;
      p.add_bias0 = w;
      p.weight0 = w;
      p.bias0 = c.kind == NormKind::LayerNorm ? w : nullptr;
      p.out0 = o0;
      if (c.two) {
        p.weight1 = w;
        p.bias1 = w;
        p.out1 = o1;
      }
      p.dtype = c.t;
      p.kind = c.kind;
      p.n = 1;
      p.hidden = c.hidden;
      add_norm(p, s);
    });
    std::printf("| add_norm | %s, hidden %d | %.2f |\n", c.what, c.hidden, us);
    for (void* p : {res, add, w, o0, o1}) cudaFree(p);
  }
  for (int vocab : {50304, 16000}) {
    float* logits = static_cast<float*>(device_zeros(static_cast<size_t>(vocab) * 4));
    ArgmaxPair* pairs = static_cast<ArgmaxPair*>(device_zeros(64));
    const double us = time_graph_us(s, 64, 20, [&](int) {
      ArgmaxParams a;
      a.logits = logits;
      a.out = pairs;
      a.n = 1;
      a.vocab_per_rank = vocab;
      a.vocab_begin = 0;
      a.vocab_size = vocab;
      vocab_argmax(a, s);
    });
    std::printf("| vocab_argmax | %d columns | %.2f |\n", vocab, us);
    cudaFree(logits);
    cudaFree(pairs);
  }
  bench_attention_decode(s);
  std::fflush(stdout);
  cudaStreamDestroy(s);
}

struct ArCase {
  const char* what;
  size_t count;
  DType dtype;
};

void bench_all_reduce() {
  int ngpu = 0;
  if (cudaGetDeviceCount(&ngpu) != cudaSuccess || ngpu < 2) {
    std::printf("\n## all_reduce: skipped (needs 2 GPUs, found %d)\n", ngpu);
    return;
  }
  const int tp = 2;
  const std::vector<ArCase> cases = {
      {"pythia-1.4b hidden, batch 1 (f16)", 2048, DType::F16},
      {"llama-7b hidden, batch 1 (bf16)", 4096, DType::BF16},
      {"llama-7b hidden, batch 8 (bf16)", 8 * 4096, DType::BF16},
      {"llama-7b hidden, batch 48 (bf16)", 48 * 4096, DType::BF16},
      {"neox-20b hidden, batch 48 (f16)", 48 * 6144, DType::F16},
      {"embedding residual, batch 1 (f32)", 4096, DType::F32},
  };
  ncclUniqueId id;
  TPS_NCCL_CHECK(ncclGetUniqueId(&id));
  std::vector<std::vector<double>> us(tp, std::vector<double>(2 * cases.size(), 0));
  std::vector<std::string> err(tp);
  std::string why_not;
  std::vector<std::thread> threads;
  for (int r = 0; r < tp; ++r) {
    threads.emplace_back([&, r] {
      try {
        TPS_CUDA_CHECK(cudaSetDevice(r));
        NcclCommunicator comm(id, r, tp);
        std::string why;
        auto car = CustomAllReduce::try_create(comm, 2u << 20, &why);
        if (r == 0 && !car) why_not = why;
        void* buf = nullptr;
        TPS_CUDA_CHECK(cudaMalloc(&buf, 4u << 20));
        TPS_CUDA_CHECK(cudaMemset(buf, 0, 4u << 20));
        for (size_t c = 0; c < cases.size(); ++c) {
          const ArCase& k = cases[c];
          comm.barrier();
          us[r][2 * c] = time_graph_us(comm.stream(), 64, 20, [&](int) { comm.all_reduce_sum(buf, k.count, k.dtype); });
          comm.barrier();
          if (car && car->eligible(buf, k.count, k.dtype))
            us[r][2 * c + 1] = time_graph_us(comm.stream(), 64, 20,
                                             [&](int) { car->all_reduce_sum(buf, k.count, k.dtype, comm.stream()); });
          comm.barrier();
        }
        cudaFree(buf);
      } catch (const std::exception& e) {
        err[r] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < tp; ++r)
    if (!err[r].empty()) throw Error("bench_kernels: all_reduce rank " + std::to_string(r) + ": " + err[r], "see above");
  std::printf("\n## all_reduce, tp 2 (64 calls per CUDA graph, both ranks replaying; us per call, rank 0)\n\n");
  if (!why_not.empty()) std::printf("custom all_reduce unavailable: %s\n\n", why_not.c_str());
  std::printf("| message | bytes | NCCL us | custom us | speedup |\n|---|---|---|---|---|\n");
  for (size_t c = 0; c < cases.size(); ++c) {
    const double nccl = us[0][2 * c], custom = us[0][2 * c + 1];
    std::printf("| %s | %zu | %.2f | %s | %s |\n", cases[c].what, cases[c].count * dtype_size(cases[c].dtype), nccl,
                custom > 0 ? std::to_string(custom).substr(0, 5).c_str() : "n/a",
                custom > 0 ? (std::to_string(nccl / custom).substr(0, 4) + "x").c_str() : "n/a");
  }
}

/// Prefill attention of one 1,024-token step: prompts of `len` tokens packed back to back (the last one
/// cut at the step's end), each in its own slot from position 0, as the runner packs a batch's prompts;
/// the tiled kernel next to the tensor-core prefill kernel, same inputs (zeros: the time does not depend
/// on the values). TFLOP/s counts 4 x head_dim flops per (query, key, head) pair the causal mask keeps.
void bench_attention_prefill() {
  TPS_CUDA_CHECK(cudaSetDevice(0));
  cudaStream_t s = nullptr;
  TPS_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  std::printf("\n## Prefill attention: tiled kernel vs prefill kernel (us per 1,024-token step, 16 calls per graph)\n\n");
  std::printf("| model shape | prompt tokens | tiled us | prefill us | speedup | prefill TFLOP/s |\n");
  std::printf("|---|---|---|---|---|---|\n");
  struct PrefillCase { const char* what; int heads, kv, hd; DType t; };
  constexpr int kStep = 1024;
  for (const PrefillCase& c : {PrefillCase{"neox-20b tp1: 64 heads, hd 96, f16", 64, 64, 96, DType::F16},
                               PrefillCase{"llama-7b tp1: 32 heads, hd 128, bf16", 32, 32, 128, DType::BF16},
                               PrefillCase{"llama-70b tp8: 8 heads / 1 kv, hd 128, bf16", 8, 1, 128, DType::BF16}}) {
    for (int len : {128, 230, 1024}) {
      const int seqs = (kStep + len - 1) / len, max_seq = len;
      std::vector<int32_t> slot, pos, zero(kStep, 0);
      double pairs = 0;
      for (int t = 0; t < kStep; ++t) {
        slot.push_back(t / len);
        pos.push_back(t % len);
        pairs += t % len + 1;
      }
      std::vector<int32_t> tiles(kStep);
      const int num_tiles = query_tiles(slot.data(), pos.data(), zero.data(), zero.data(), kStep, kPrefillTileRows,
                                        tiles.data());
      std::vector<int32_t> meta_h;
      for (const auto* v : {&slot, &pos, &zero, &tiles}) meta_h.insert(meta_h.end(), v->begin(), v->end());
      int32_t* meta = static_cast<int32_t*>(device_zeros(meta_h.size() * 4));
      TPS_CUDA_CHECK(cudaMemcpy(meta, meta_h.data(), meta_h.size() * 4, cudaMemcpyHostToDevice));
      const int64_t stride = static_cast<int64_t>(c.heads + 2 * c.kv) * c.hd;
      const size_t cache_bytes = static_cast<size_t>(seqs) * c.kv * max_seq * c.hd * 2;
      void* qkv = device_zeros(kStep * stride * 2);
      void* kc = device_zeros(cache_bytes);
      void* vc = device_zeros(cache_bytes);
      void* out = device_zeros(static_cast<size_t>(kStep) * c.heads * c.hd * 2);
      AttentionParams a;
      a.q = qkv;
      a.q_stride = stride;
      a.k_cache = kc;
      a.v_cache = vc;
      a.slots = meta;
      a.positions = meta + kStep;
      a.prefix_slots = meta + 2 * kStep;
      a.prefix_lens = meta + 2 * kStep;
      a.out = out;
      a.dtype = c.t;
      a.n = kStep;
      a.num_heads = c.heads;
      a.num_kv_heads = c.kv;
      a.head_dim = c.hd;
      a.max_seq_len = max_seq;
      a.scale = 0.1f;
      const double tiled = time_graph_us(s, 16, 5, [&](int) { attention_tiled(a, s); });
      a.q_tiles = meta + 3 * kStep;
      a.num_q_tiles = num_tiles;
      const double prefill = time_graph_us(s, 16, 5, [&](int) { attention_prefill(a, s); });
      const double flops = 4.0 * c.hd * c.heads * pairs;
      std::printf("| %s | %d | %.1f | %.1f | %.1fx | %.1f |\n", c.what, len, tiled, prefill, tiled / prefill,
                  flops / prefill / 1e6);
      for (void* p : {qkv, kc, vc, out, static_cast<void*>(meta)}) cudaFree(p);
    }
  }
  cudaStreamDestroy(s);
}

}  // namespace

int main(int argc, char** argv) {
  std::string only;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--only") == 0 && i + 1 < argc) {
      only = argv[++i];
    } else {
      std::fprintf(stderr, "usage: bench_kernels [--only linear|gemv_sweep|pieces|prefill|all_reduce]\n");
      return 2;
    }
  }
  try {
    int ngpu = 0;
    if (cudaGetDeviceCount(&ngpu) != cudaSuccess || ngpu == 0) {
      std::fprintf(stderr, "error: bench_kernels needs a GPU\n");
      return 1;
    }
    if (only.empty() || only == "linear") bench_linear();
    if (only.empty() || only == "gemv_sweep") bench_gemv_sweep();
    if (only.empty() || only == "pieces") bench_pieces();
    if (only.empty() || only == "prefill") bench_attention_prefill();
    if (only.empty() || only == "all_reduce") bench_all_reduce();
  } catch (const Error& e) {
    std::fprintf(stderr, "error: %s\nhint: %s\n", e.what(), e.hint().c_str());
    return 1;
  }
  return 0;
}
