// test_main.cpp: doctest main of test_kernels; exits 0 with "skipped: no GPU" when no device is visible.
#define DOCTEST_CONFIG_IMPLEMENT
#include <cuda_runtime.h>
#include <doctest/doctest.h>

#include <cstdio>

int main(int argc, char** argv) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::printf("skipped: no GPU\n");
    return 0;
  }
  doctest::Context ctx(argc, argv);
  return ctx.run();
}
