// process_memory.cpp: VmHWM / VmRSS from /proc/self/status (process_memory.h).
#include "runtime/process_memory.h"

#include <sys/resource.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

#include "format/error.h"

namespace tpshard {
namespace {

/// The value of a "Key:   123 kB" line of /proc/self/status in bytes, or 0 when absent.
uint64_t status_kib_field(const char* key) {
  FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return 0;
  char line[256];
  uint64_t kib = 0;
  const size_t n = std::strlen(key);
  while (std::fgets(line, sizeof(line), f)) {
    if (std::strncmp(line, key, n) == 0 && line[n] == ':') {
      unsigned long long v = 0;
      if (std::sscanf(line + n + 1, "%llu", &v) == 1) kib = v;
      break;
    }
  }
  std::fclose(f);
  return kib * 1024;
}

}  // namespace

uint64_t peak_rss_bytes() {
  if (uint64_t b = status_kib_field("VmHWM")) return b;
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<uint64_t>(ru.ru_maxrss) * 1024;  // KiB on Linux
}

uint64_t current_rss_bytes() { return status_kib_field("VmRSS"); }

uint64_t rss_anon_bytes() { return status_kib_field("RssAnon"); }

uint64_t rss_file_bytes() { return status_kib_field("RssFile"); }

namespace {

/// The first number of a file (e.g. /sys/fs/cgroup/memory.max), or -1 when absent or not a number ("max").
int64_t file_number(const std::string& path) {
  std::ifstream f(path);
  long long v = -1;
  if (!(f >> v)) return -1;
  return v;
}

std::string gib(uint64_t b) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f GiB", static_cast<double>(b) / (1024.0 * 1024.0 * 1024.0));
  return buf;
}

}  // namespace

uint64_t available_host_memory_bytes() {
  uint64_t avail = 0;
  if (FILE* f = std::fopen("/proc/meminfo", "r")) {
    char line[256];
    while (std::fgets(line, sizeof(line), f)) {
      unsigned long long kib = 0;
      if (std::sscanf(line, "MemAvailable: %llu kB", &kib) == 1) {
        avail = kib * 1024;
        break;
      }
    }
    std::fclose(f);
  }
  const int64_t max = file_number("/sys/fs/cgroup/memory.max"), cur = file_number("/sys/fs/cgroup/memory.current");
  if (max > 0 && cur >= 0) {
    const uint64_t headroom = max > cur ? static_cast<uint64_t>(max - cur) : 0;
    if (avail == 0 || headroom < avail) avail = headroom;
  }
  return avail;
}

std::string check_cpu_memory(uint64_t weights_bytes, uint64_t kv_cache_bytes, uint64_t available,
                             const std::string& model_dir) {
  if (available == 0 || weights_bytes + kv_cache_bytes <= available) return {};
  if (weights_bytes > available)
    throw Error("CPU backend: the f32 weights of " + model_dir + " take " + gib(weights_bytes) + " of host memory but " +
                    gib(available) + " are available",
                "use --device cuda, a machine with more memory, or a smaller model");
  return "warning: CPU backend: the f32 weights (" + gib(weights_bytes) + ") and a full kv_cache (" + gib(kv_cache_bytes) +
         ") of " + model_dir + " exceed the " + gib(available) +
         " of host memory available; long sequences may run out (lower --max-batch or --max-seq-len)";
}

}  // namespace tpshard
