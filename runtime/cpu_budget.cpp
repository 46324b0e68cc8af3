// cpu_budget.cpp: usable_cpus (cpu_budget.h).
#include "runtime/cpu_budget.h"

#include <sched.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>

#include "runtime/tuning.h"

namespace tpshard {
namespace {

/// The cgroup v2 CPU limit of this process in whole CPUs (rounded up), or 0 when there is none: the
/// "0::/path" line of /proc/self/cgroup names the cgroup, whose cpu.max reads "max PERIOD" (no limit)
/// or "QUOTA PERIOD".
int cgroup_cpu_limit() {
  std::ifstream cg("/proc/self/cgroup");
  std::string line, path;
  while (std::getline(cg, line))
    if (line.rfind("0::", 0) == 0) path = line.substr(3);
  for (const std::string& dir : {"/sys/fs/cgroup" + path, std::string("/sys/fs/cgroup")}) {
    std::ifstream f(dir + "/cpu.max");
    std::string quota;
    long long period = 0;
    if (!(f >> quota >> period)) continue;
    if (quota == "max" || period <= 0) return 0;
    try {
      const long long q = std::stoll(quota);
      if (q <= 0) return 0;
      return static_cast<int>(std::min<long long>((q + period - 1) / period, 1 << 20));
    } catch (...) {
      return 0;
    }
  }
  return 0;
}

}  // namespace

int usable_cpus() {
  int n = 0;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) n = CPU_COUNT(&set);
  if (n <= 0) n = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int limit = cgroup_cpu_limit();
  if (limit > 0) n = std::min(n, limit);
  return std::max(1, n);
}

int threads_per_rank(int ranks, int omp_hint) {
  const int cpus = usable_cpus();
  if (omp_hint > 0) return std::min(omp_hint, cpus);
  return std::max(1, cpus / std::max(1, ranks));
}

int threads_per_rank(int ranks) { return threads_per_rank(ranks, tuning().omp_num_threads); }

std::string affinity_mask_string() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return "";
  std::string out;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (!CPU_ISSET(c, &set)) continue;
    int e = c;
    while (e + 1 < CPU_SETSIZE && CPU_ISSET(e + 1, &set)) ++e;
    out += (out.empty() ? "" : ",") + std::to_string(c) + (e > c ? "-" + std::to_string(e) : std::string());
    c = e;
  }
  return out;
}

}  // namespace tpshard
