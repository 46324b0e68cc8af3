// test_main.cpp: doctest main of test_gpu_runtime. Without a CUDA device it prints "skipped: no GPU"
// and runs only the CPU cases (names starting with "[cpu]"), so CI (no GPU) stays green and meaningful.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>

#include "runtime/cuda/cuda_session.h"

int main(int argc, char** argv) {
  doctest::Context ctx;
  ctx.applyCommandLine(argc, argv);
  if (tpshard::cuda::cuda_device_count() == 0) {
    std::printf("skipped: no GPU (running only the [cpu] cases)\n");
    ctx.addFilter("test-case", "[cpu]*");
  }
  return ctx.run();
}
