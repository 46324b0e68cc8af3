// bench_h2d: the host-to-device limits the weight loader (runtime/load, runtime/cuda/weight_arena.cpp)
// works against, on GPU 0:
//   1. pinning a staging ring: cudaHostRegister of 4 KiB-aligned memory, of 2 MiB-aligned memory advised
//      for transparent huge pages (MADV_HUGEPAGE), cudaHostAlloc; and the time to release each;
//   2. cudaMalloc and cudaMemset of an arena of --gb GB;
//   3. the pinned copy rate: --gb GB copied in 2, 8 and 64 MiB cudaMemcpyAsync pieces from a 64 MiB ring,
//      round-robin over 1, 4 and 16 streams.
// Usage: bench_h2d [--gb 13.5]. Prints markdown tables.
#include <cuda_runtime.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "runtime/cuda/check.h"

namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

enum class Pin { Register4K, RegisterHuge, HostAlloc };
const char* pin_name(Pin p) {
  return p == Pin::Register4K ? "aligned_alloc 4 KiB + cudaHostRegister"
         : p == Pin::RegisterHuge ? "aligned_alloc 2 MiB + MADV_HUGEPAGE + cudaHostRegister"
                                  : "cudaHostAlloc";
}

/// A pinned host buffer of `bytes` made the way `p` says; *ms: the time it took.
void* pinned(Pin p, size_t bytes, double* ms) {
  const auto t = Clock::now();
  void* h = nullptr;
  if (p == Pin::HostAlloc) {
    TPS_CUDA_CHECK(cudaHostAlloc(&h, bytes, cudaHostAllocDefault));
  } else {
    const size_t align = p == Pin::RegisterHuge ? (size_t(2) << 20) : 4096;
    h = std::aligned_alloc(align, (bytes + align - 1) / align * align);
    if (!h) throw tpshard::Error("bench_h2d: out of host memory", "free host memory");
    if (p == Pin::RegisterHuge) madvise(h, bytes, MADV_HUGEPAGE);
    TPS_CUDA_CHECK(cudaHostRegister(h, bytes, cudaHostRegisterDefault));
  }
  *ms = ms_since(t);
  return h;
}

void release(Pin p, void* h) {
  if (p == Pin::HostAlloc) {
    cudaFreeHost(h);
  } else {
    cudaHostUnregister(h);
    std::free(h);
  }
}

}  // namespace

int main(int argc, char** argv) {
  try {
    double gb = 13.5;
    for (int i = 1; i < argc; ++i) {
      if (std::strcmp(argv[i], "--gb") == 0 && i + 1 < argc) {
        gb = std::atof(argv[++i]);
      } else {
        std::fprintf(stderr, "usage: bench_h2d [--gb 13.5]\n");
        return 2;
      }
    }
    const size_t total = static_cast<size_t>(gb * 1e9), ring = size_t(64) << 20;
    TPS_CUDA_CHECK(cudaSetDevice(0));
    TPS_CUDA_CHECK(cudaFree(nullptr));
    cudaDeviceProp prop{};
    TPS_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    std::printf("# bench_h2d on %s, %.1f GB\n\n| pinning a 64 MiB ring | ms (1st) | ms (2nd) | release ms |\n|---|---|---|---|\n",
                prop.name, gb);
    for (Pin p : {Pin::Register4K, Pin::RegisterHuge, Pin::HostAlloc}) {
      double ms[2], rel = 0;
      for (double& m : ms) {
        void* h = pinned(p, ring, &m);
        const auto t = Clock::now();
        release(p, h);
        rel = ms_since(t);
      }
      std::printf("| %s | %.2f | %.2f | %.2f |\n", pin_name(p), ms[0], ms[1], rel);
    }
    void* d = nullptr;
    auto t = Clock::now();
    TPS_CUDA_CHECK(cudaMalloc(&d, total));
    const double alloc_ms = ms_since(t);
    t = Clock::now();
    TPS_CUDA_CHECK(cudaMemset(d, 0, total));
    TPS_CUDA_CHECK(cudaDeviceSynchronize());
    std::printf("\n| arena | ms |\n|---|---|\n| cudaMalloc | %.2f |\n| cudaMemset (all of it) | %.2f |\n", alloc_ms,
                ms_since(t));
    double pin_ms = 0;
    void* h = pinned(Pin::RegisterHuge, ring, &pin_ms);
    std::printf("\n| copy piece MiB | streams | ms | GB/s |\n|---|---|---|---|\n");
    for (size_t piece : {size_t(2) << 20, size_t(8) << 20, size_t(64) << 20}) {
      for (int n_streams : {1, 4, 16}) {
        std::vector<cudaStream_t> streams(n_streams);
        for (auto& s : streams) TPS_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
        TPS_CUDA_CHECK(cudaDeviceSynchronize());
        t = Clock::now();
        size_t i = 0;
        for (size_t off = 0; off < total; off += piece, ++i) {
          const size_t n = std::min(piece, total - off);
          TPS_CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(d) + off, static_cast<char*>(h) + (i * piece) % ring, n,
                                         cudaMemcpyHostToDevice, streams[i % streams.size()]));
        }
        TPS_CUDA_CHECK(cudaDeviceSynchronize());
        const double ms = ms_since(t);
        std::printf("| %zu | %d | %.1f | %.2f |\n", piece >> 20, n_streams, ms, total / ms / 1e6);
        for (auto s : streams) cudaStreamDestroy(s);
      }
    }
    release(Pin::RegisterHuge, h);
    cudaFree(d);
    return 0;
  } catch (const tpshard::Error& e) {
    std::fprintf(stderr, "error: %s\nhint: %s\n", e.what(), e.hint().c_str());
    return 1;
  }
}
