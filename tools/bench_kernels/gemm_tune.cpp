// gemm_tune.cpp: see gemm_tune.h.
#include "tools/bench_kernels/gemm_tune.h"

#include <algorithm>
#include <cstdio>
#include <vector>

#include "format/dtype.h"
#include "kernels/gemm.cuh"
#include "runtime/cuda/check.h"
#include "tools/bench_kernels/graph_timer.h"
#include "tools/copy_bandwidth.h"

namespace tpshard::cuda {
namespace {

struct Product {
  const char* model;
  const char* layer;
  int out, in;
  DType dtype;
};

}  // namespace

void bench_gemm_tune() {
  TPS_CUDA_CHECK(cudaSetDevice(0));
  const double bw = device_copy_gbps();
  const std::vector<Product> products = {
      {"pythia-1.4b", "qkv", 6144, 2048, DType::F16},        {"pythia-1.4b", "mlp up", 8192, 2048, DType::F16},
      {"pythia-1.4b", "mlp down", 2048, 8192, DType::F16},   {"llama-7b", "qkv", 12288, 4096, DType::BF16},
      {"llama-7b", "attn out", 4096, 4096, DType::BF16},     {"llama-7b", "gate_up", 22016, 4096, DType::BF16},
      {"llama-7b", "down", 4096, 11008, DType::BF16},        {"gpt-neox-20b", "qkv", 18432, 6144, DType::F16},
      {"gpt-neox-20b", "mlp up", 24576, 6144, DType::F16},   {"gpt-neox-20b", "mlp down", 6144, 24576, DType::F16},
  };
  cudaStream_t s = nullptr;
  TPS_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  std::printf("\n## cuBLASLt: heuristic vs autotuned algorithm (GPU 0; copy bandwidth %.0f GB/s)\n\n", bw);
  std::printf("| model | layer | tokens | weight MiB | heuristic us | GB/s | %% of copy BW | autotuned us | GB/s | %% of copy BW | speedup |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const Product& p : products) {
    const size_t wbytes = static_cast<size_t>(p.out) * p.in * 2;
    const int copies = static_cast<int>(std::max<size_t>(2, (512ull << 20) / wbytes + 1));
    void* w = nullptr;
    TPS_CUDA_CHECK(cudaMalloc(&w, wbytes * copies));
    TPS_CUDA_CHECK(cudaMemset(w, 0, wbytes * copies));
    for (int n : {8, 16, 32, 48, 64, 128}) {
      void *x = nullptr, *y = nullptr;
      TPS_CUDA_CHECK(cudaMalloc(&x, static_cast<size_t>(n) * p.in * 2));
      TPS_CUDA_CHECK(cudaMemset(x, 0, static_cast<size_t>(n) * p.in * 2));
      TPS_CUDA_CHECK(cudaMalloc(&y, static_cast<size_t>(n) * p.out * 2));
      double us[2];
      for (int tuned = 0; tuned < 2; ++tuned) {
        Gemm gemm;
        if (tuned) gemm.set_autotune_max_rows(n);
        us[tuned] = time_graph_us(s, std::max(copies, 24), 10, [&](int i) {
          GemmArgs a;
          a.x = x;
          a.w = static_cast<const char*>(w) + (i % copies) * wbytes;
          a.y = y;
          a.n = n;
          a.out = p.out;
          a.in = p.in;
          a.in_dtype = a.out_dtype = p.dtype;
          gemm.linear(a, s);
        });
      }
      auto gbps = [&](double u) { return wbytes / (u * 1e-6) / 1e9; };
      std::printf("| %s | %s | %d | %.1f | %.2f | %.0f | %.0f%% | %.2f | %.0f | %.0f%% | %.2fx |\n", p.model, p.layer, n,
                  wbytes / 1048576.0, us[0], gbps(us[0]), 100 * gbps(us[0]) / bw, us[1], gbps(us[1]),
                  100 * gbps(us[1]) / bw, us[0] / us[1]);
      std::fflush(stdout);
      cudaFree(x);
      cudaFree(y);
    }
    cudaFree(w);
  }
  cudaStreamDestroy(s);
}

}  // namespace tpshard::cuda
