// process_memory.cpp: VmHWM / VmRSS from /proc/self/status (process_memory.h).
#include "runtime/process_memory.h"

#include <sys/resource.h>

#include <cstdio>
#include <cstring>

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

}  // namespace tpshard
