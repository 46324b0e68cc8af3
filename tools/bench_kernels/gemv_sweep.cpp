// gemv_sweep.cpp: see gemv_sweep.h.
#include "tools/bench_kernels/gemv_sweep.h"

#include <algorithm>
#include <utility>
#include <cstdio>
#include <string>
#include <vector>

#include "kernels/gemv.cuh"
#include "runtime/cuda/check.h"
#include "tools/bench_kernels/busy_kernel.h"
#include "tools/bench_kernels/graph_timer.h"
#include "tools/copy_bandwidth.h"

namespace tpshard::cuda {
namespace {

/// One linear layer of the sweep: y = epilogue(x W^T (+ x2 W2^T) + b).
struct Product {
  int out, in, in2;
  GemvEpilogue epilogue;
  bool bias;
  size_t weight_bytes(DType t) const {
    const size_t rows = epilogue == GemvEpilogue::GatedAct ? 2 * static_cast<size_t>(out) : out;
    return (rows * in + static_cast<size_t>(out) * in2) * dtype_size(t);
  }
};

/// What a decode layer launches, in order: a product, the pair (products i and i + 1 in one launch),
/// or a busy stand-in of `us` microseconds on `blocks` blocks.
struct Op {
  enum Kind { Gemv, Pair, Busy } kind;
  int product;
  double us;
  int blocks;
};

struct LayerShape {
  const char* name;
  DType dtype;
  std::vector<Product> products;
  std::vector<Op> ops;
};

std::string name(const GemvTuning& t) {
  std::string n = t.fifo_depth == 0 ? std::string("registers") : "fifo " + std::to_string(t.fifo_depth) + "x" + std::to_string(t.warps_per_block);
  if (t.fifo_depth == 0 && t.warps_per_block != 4) n += ", " + std::to_string(t.warps_per_block) + " warps";
  return n + (t.warps_per_row ? ", P" + std::to_string(t.warps_per_row) : ", P auto");
}

double busy_us(const LayerShape& l) {
  double us = 0;
  for (const Op& op : l.ops) us += op.kind == Op::Busy ? op.us : 0;
  return us;
}

}  // namespace

void bench_gemv_sweep() {
  TPS_CUDA_CHECK(cudaSetDevice(0));
  const double bw = device_copy_gbps();
  const auto None = GemvEpilogue::None, Act = GemvEpilogue::Act, Gated = GemvEpilogue::GatedAct;
  // Busy stand-ins: add_norm ~3 us (1-16 blocks), decode attention ~4 us (16 heads x splits), the
  // fused all_reduce + add_norm at tp 2 ~4 us (bench_kernels "pieces" / docs/BENCHMARKS.md).
  const std::vector<LayerShape> layers = {
      {"pythia-1.4b f16 (pair qkv+up, attention, dense+down, add_norm)",
       DType::F16,
       {{6144, 2048, 0, None, true}, {8192, 2048, 0, Act, true}, {2048, 2048, 8192, None, false}},
       {{Op::Pair, 0, 0, 0}, {Op::Busy, 0, 4.0, 16}, {Op::Gemv, 2, 0, 0}, {Op::Busy, 0, 3.0, 8}}},
      {"pythia-1.4b f16, the pair qkv+up alone", DType::F16,
       {{6144, 2048, 0, None, true}, {8192, 2048, 0, Act, true}}, {{Op::Pair, 0, 0, 0}}},
      {"pythia-1.4b f16, dense+down alone", DType::F16, {{2048, 2048, 8192, None, false}}, {{Op::Gemv, 0, 0, 0}}},
      {"llama-7b tp1 bf16, down alone", DType::BF16, {{4096, 11008, 0, None, false}}, {{Op::Gemv, 0, 0, 0}}},
      {"llama-7b tp2 bf16 (qkv, attention, o, all_reduce+norm, gate_up, down, all_reduce+norm)",
       DType::BF16,
       {{6144, 4096, 0, None, false}, {4096, 2048, 0, None, false}, {5504, 4096, 0, Gated, false},
        {4096, 5504, 0, None, false}},
       {{Op::Gemv, 0, 0, 0}, {Op::Busy, 0, 3.5, 16}, {Op::Gemv, 1, 0, 0}, {Op::Busy, 0, 4.0, 16},
        {Op::Gemv, 2, 0, 0}, {Op::Gemv, 3, 0, 0}, {Op::Busy, 0, 4.0, 16}}},
      {"llama-7b tp1 bf16 (qkv, attention, o, add_norm, gate_up, down, add_norm)",
       DType::BF16,
       {{12288, 4096, 0, None, false}, {4096, 4096, 0, None, false}, {11008, 4096, 0, Gated, false},
        {4096, 11008, 0, None, false}},
       {{Op::Gemv, 0, 0, 0}, {Op::Busy, 0, 3.5, 32}, {Op::Gemv, 1, 0, 0}, {Op::Busy, 0, 3.0, 16},
        {Op::Gemv, 2, 0, 0}, {Op::Gemv, 3, 0, 0}, {Op::Busy, 0, 3.0, 16}}},
  };
  // P = warps per output row (split-K); "P auto" is what the transformer launches (gemv_auto_warps_per_row)
  const GemvTuning tunings[] = {{0, 4, 0}, {0, 4, 1}, {0, 4, 2}, {0, 4, 4}, {0, 8, 1}, {0, 8, 2},
                               {0, 8, 4}, {4, 4, 0}, {4, 4, 1}, {4, 4, 2}, {4, 8, 1}, {4, 8, 2}};

  cudaStream_t s = nullptr;
  TPS_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  std::printf("\n## Decode GEMV weight streaming: tunings on whole layers (GPU 0; copy bandwidth %.0f GB/s)\n\n", bw);
  std::printf("registers = register batches (the session-2 kernel); busy = latency-bound stand-ins where\n"
              "attention and the norms run; GEMV GB/s = weight bytes / (us per layer - busy us).\n\n");
  std::printf("| layer | tokens | busy us | tuning (fifo DEPTHxWARPS; per launch in launch order) | us/layer | GEMV GB/s | %% of copy BW |\n");
  std::printf("|---|---|---|---|---|---|---|\n");
  for (const LayerShape& l : layers) {
    size_t layer_bytes = 0;
    std::vector<size_t> offset;  // of each product's weights (w, then w2) within one layer copy
    for (const Product& p : l.products) {
      offset.push_back(layer_bytes);
      layer_bytes += (p.weight_bytes(l.dtype) + 255) / 256 * 256;
    }
    const int copies = static_cast<int>(std::max<size_t>(2, (1ull << 30) / layer_bytes + 1));
    void* w = nullptr;
    TPS_CUDA_CHECK(cudaMalloc(&w, layer_bytes * copies));
    TPS_CUDA_CHECK(cudaMemset(w, 0, layer_bytes * copies));  // zeros: finite everywhere
    const size_t es = dtype_size(l.dtype);
    size_t widest = 0;
    for (const Product& p : l.products) widest = std::max<size_t>({widest, size_t(2) * p.out, size_t(p.in), size_t(p.in2)});
    std::vector<void*> bufs;
    auto alloc = [&](size_t bytes) {
      void* p = nullptr;
      TPS_CUDA_CHECK(cudaMalloc(&p, bytes));
      TPS_CUDA_CHECK(cudaMemset(p, 0, bytes));
      bufs.push_back(p);
      return p;
    };
    const size_t buf_bytes = 8 * widest * es;
    void* x = alloc(buf_bytes);
    void* x2 = alloc(buf_bytes);
    void* bias = alloc(buf_bytes);
    std::vector<void*> ys;
    for (size_t i = 0; i < l.products.size(); ++i) ys.push_back(alloc(buf_bytes));

    // us per layer of n tokens, product i streamed with tuning[i], busy stand-ins on or off
    auto time_layer = [&](int n, bool with_busy, const std::vector<GemvTuning>& tuning) {
      auto args = [&](int i, int copy) {
        const Product& p = l.products[i];
        GemvArgs a;
        a.x = x;
        a.w = static_cast<const char*>(w) + copy * layer_bytes + offset[i];
        a.y = ys[i];
        a.bias = p.bias ? bias : nullptr;
        a.n = n;
        a.out = p.out;
        a.in = p.in;
        a.dtype = a.out_dtype = l.dtype;
        a.epilogue = p.epilogue;
        a.act = Activation::Gelu;
        if (p.in2 > 0) {
          a.x2 = x2;
          a.w2 = static_cast<const char*>(a.w) + static_cast<size_t>(p.out) * p.in * es;
          a.in2 = p.in2;
        }
        a.tuning = tuning[i];
        return a;
      };
      return time_graph_us(s, copies, 10, [&](int copy) {
        for (const Op& op : l.ops) {
          if (op.kind == Op::Gemv) gemv(args(op.product, copy), s);
          if (op.kind == Op::Pair) gemv_pair(args(op.product, copy), args(op.product + 1, copy), s);
          if (op.kind == Op::Busy && with_busy) TPS_CUDA_CHECK(launch_busy(op.blocks, op.us, s));
        }
      });
    };
    size_t bytes = 0;
    for (const Product& p : l.products) bytes += p.weight_bytes(l.dtype);
    auto row = [&](int n, double busy, const std::string& tuning, double us) {
      const double gbps = bytes / ((us - busy) * 1e-6) / 1e9;
      std::printf("| %s | %d | %.1f | %s | %.2f | %.0f | %.0f%% |\n", l.name, n, busy, tuning.c_str(), us, gbps,
                  100 * gbps / bw);
      std::fflush(stdout);
    };
    const int products = static_cast<int>(l.products.size());
    for (int n : {1, 2}) {
      for (bool with_busy : {false, true}) {
        if (with_busy && busy_us(l) == 0) continue;
        for (const GemvTuning& tu : tunings) {
          const double us = time_layer(n, with_busy, std::vector<GemvTuning>(products, tu));
          row(n, with_busy ? busy_us(l) : 0.0, name(tu), us);
        }
      }
    }
    // Per launch: every assignment of {registers, FIFO 4x4} x {P 1, P 2} to the layer's GEMV launches
    // (the pair's tuning is its first product's), n 1 with busy stand-ins; the three best are printed.
    std::vector<int> launches;  // product index of each GEMV launch
    for (const Op& op : l.ops)
      if (op.kind != Op::Busy) launches.push_back(op.product);
    const GemvTuning options[] = {{0, 4, 1}, {0, 4, 2}, {4, 4, 1}, {4, 4, 2}};
    constexpr int kOptions = 4;
    int combos = 1;
    for (size_t k = 0; k < launches.size(); ++k) combos *= kOptions;
    std::vector<std::pair<double, std::string>> timed;
    for (int c = 0; c < combos; ++c) {
      std::vector<GemvTuning> tuning(products, options[0]);
      std::string label;
      for (size_t k = 0, code = c; k < launches.size(); ++k, code /= kOptions) {
        tuning[launches[k]] = options[code % kOptions];
        label += (k ? " / " : "") + name(options[code % kOptions]);
      }
      timed.emplace_back(time_layer(1, busy_us(l) > 0, tuning), label);
    }
    std::sort(timed.begin(), timed.end());
    for (size_t k = 0; k < timed.size() && k < 3; ++k)
      row(1, busy_us(l), "per launch, best " + std::to_string(k + 1) + " of " + std::to_string(combos) + ": " +
                            timed[k].second, timed[k].first);
    for (void* p : bufs) cudaFree(p);
    cudaFree(w);
  }
  cudaStreamDestroy(s);
}

}  // namespace tpshard::cuda
