// cpu_budget.h: how many CPUs this process may use, as the thread counts of the CPU backend, the loader
// and the converter need it. std::thread::hardware_concurrency() counts the machine's CPUs and ignores
// what launchers and containers set: the affinity mask (taskset, srun --cpus-per-task, numactl, docker
// --cpuset-cpus) and the cgroup v2 CPU quota (docker --cpus, Kubernetes CPU limits).
#pragma once

namespace tpshard {

/// CPUs the calling thread may run on: the count of its affinity mask (sched_getaffinity), capped by the
/// cgroup v2 quota of this process's cgroup (cpu.max "QUOTA PERIOD", rounded up), at least 1. Falls back
/// to hardware_concurrency() when the mask cannot be read.
int usable_cpus();

}  // namespace tpshard
