// cpu_budget.h: how many CPUs this process may use, as the thread counts of the CPU backend, the loader
// and the converter need it. std::thread::hardware_concurrency() counts the machine's CPUs and ignores
// what launchers and containers set: the affinity mask (taskset, srun --cpus-per-task, numactl, docker
// --cpuset-cpus) and the cgroup v2 CPU quota (docker --cpus, Kubernetes CPU limits).
#pragma once
#include <string>

namespace tpshard {

/// CPUs the calling thread may run on: the count of its affinity mask (sched_getaffinity), capped by the
/// cgroup v2 quota of this process's cgroup (cpu.max "QUOTA PERIOD", rounded up), at least 1. Falls back
/// to hardware_concurrency() when the mask cannot be read.
int usable_cpus();

/// Matmul threads of one rank when `ranks` ranks share this process's CPUs (threads of one process, or
/// processes of one node with the same affinity mask): OMP_NUM_THREADS when it is a positive integer
/// (a hint, capped at usable_cpus()), else max(1, usable_cpus() / ranks). The hint is tuning()'s
/// omp_num_threads (runtime/tuning.h); the two-argument form takes it as given (0: none).
int threads_per_rank(int ranks);
int threads_per_rank(int ranks, int omp_hint);

/// This thread's affinity mask as a list of CPU numbers ("0-3,8"), "" when it cannot be read: ranks
/// compare it to count the ranks that share their CPUs.
std::string affinity_mask_string();

}  // namespace tpshard
