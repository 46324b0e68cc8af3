// bench_tokenizer: encode/decode throughput of tpshard's Tokenizer on one core.
// Usage: bench_tokenizer TOKENIZER_DIR TEXT_FILE [--repeat N]
// Prints one table row per phase: MB/s of input text (wall clock; the *(cpu) rows use this
// thread's CPU time, closer to the one-core cost on a loaded machine) and the token count. The
// first encode runs on a cold word cache; "encode(warm)" is the best of N repeats with it filled.
#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>

#include "format/error.h"
#include "tokenizer/tokenizer.h"

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// CPU time of this thread: on a loaded machine this is closer to the one-core cost than wall time.
double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s TOKENIZER_DIR TEXT_FILE [--repeat N]\n", argv[0]);
    return 2;
  }
  int repeat = 3;
  for (int i = 3; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], "--repeat") == 0) repeat = std::max(1, std::atoi(argv[i + 1]));
  try {
    std::ifstream in(argv[2], std::ios::binary);
    if (!in) throw tpshard::Error(std::string(argv[2]) + ": cannot open", "pass a text file");
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    auto t0 = std::chrono::steady_clock::now();
    auto tok = tpshard::Tokenizer::load(argv[1]);
    const double load_s = seconds_since(t0);
    const double mb = static_cast<double>(text.size()) / 1e6;

    std::printf("%-14s %10s %10s %12s %10s\n", "phase", "MB", "seconds", "MB/s", "tokens");
    std::printf("%-14s %10s %10s %12s %10s\n", "", "(1e6 B)", "(s)", "(text)", "(count)");
    std::printf("%-14s %10s %10.3f %12s %10lld\n", "load", "-", load_s, "-", static_cast<long long>(tok->vocab_size()));

    t0 = std::chrono::steady_clock::now();
    const double cold_c0 = thread_cpu_seconds();
    auto ids = tok->encode(text, false);
    const double cold_cpu = thread_cpu_seconds() - cold_c0;
    double s = seconds_since(t0);
    std::printf("%-14s %10.2f %10.3f %12.2f %10zu\n", "encode(cold)", mb, s, mb / s, ids.size());

    double best = 1e30, best_cpu = 1e30;
    for (int r = 0; r < repeat; ++r) {
      t0 = std::chrono::steady_clock::now();
      const double c0 = thread_cpu_seconds();
      ids = tok->encode(text, false);
      best_cpu = std::min(best_cpu, thread_cpu_seconds() - c0);
      best = std::min(best, seconds_since(t0));
    }
    std::printf("%-14s %10.2f %10.3f %12.2f %10zu\n", "encode(warm)", mb, best, mb / best, ids.size());
    std::printf("%-14s %10.2f %10.3f %12.2f %10zu\n", "cold(cpu)", mb, cold_cpu, mb / cold_cpu, ids.size());
    std::printf("%-14s %10.2f %10.3f %12.2f %10zu\n", "warm(cpu)", mb, best_cpu, mb / best_cpu, ids.size());

    t0 = std::chrono::steady_clock::now();
    const std::string back = tok->decode(ids, false);
    s = seconds_since(t0);
    std::printf("%-14s %10.2f %10.3f %12.2f %10zu\n", "decode", mb, s, mb / s, ids.size());
    std::printf("bytes/token %.2f, round trip %s\n", static_cast<double>(text.size()) / static_cast<double>(ids.size()),
                back == text ? "exact" : "differs");
  } catch (const tpshard::Error& e) {
    std::fprintf(stderr, "error: %s\nhint: %s\n", e.what(), e.hint().c_str());
    return 1;
  }
  return 0;
}
