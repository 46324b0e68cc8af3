// test_cpu_budget.cpp: usable_cpus follows the affinity mask (what taskset and srun --cpus-per-task set),
// and the CPU backend's default thread count follows it.
#include <doctest/doctest.h>

#include <pthread.h>
#include <sched.h>

#include <thread>

#include "runtime/cpu/thread_pool.h"
#include "runtime/cpu_budget.h"

using namespace tpshard;

TEST_CASE("usable_cpus counts the affinity mask, not the machine; threads per rank follow it") {
  CHECK(usable_cpus() >= 1);
  CHECK(usable_cpus() <= static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  cpu_set_t mine;
  CPU_ZERO(&mine);
  REQUIRE(sched_getaffinity(0, sizeof(mine), &mine) == 0);
  int first = -1;
  for (int c = 0; c < CPU_SETSIZE && first < 0; ++c)
    if (CPU_ISSET(c, &mine)) first = c;
  REQUIRE(first >= 0);
  int seen = 0, per_rank = 0;
  std::thread t([&] {  // a thread pinned to one CPU, as `taskset -c N` pins a process
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(first, &one);
    if (pthread_setaffinity_np(pthread_self(), sizeof(one), &one) != 0) return;
    seen = usable_cpus();
    per_rank = ThreadPool::default_threads_per_rank(2);
  });
  t.join();
  CHECK(seen == 1);
  CHECK(per_rank == 1);
}
