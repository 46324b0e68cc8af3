// test_rendezvous.cpp: the TCP rendezvous and the launcher's environment reading (no GPU needed).
// Ranks are threads of this process talking over 127.0.0.1, with rank-dependent blobs.
#include <doctest/doctest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "format/error.h"
#include "runtime/launcher.h"
#include "runtime/rendezvous.h"

using namespace tpshard;

TEST_CASE("[cpu] rendezvous: broadcast and all_gather with rank-dependent blobs") {
  const int world = 4;
  const std::string addr = "127.0.0.1:" + std::to_string(find_free_port());
  std::vector<std::future<std::pair<std::string, std::vector<std::string>>>> ranks;
  for (int r = 0; r < world; ++r)
    ranks.push_back(std::async(std::launch::async, [=] {
      Rendezvous rv(addr, r, world, 20.0);
      std::string b = rv.broadcast(r == 0 ? std::string("id-from-rank-0\0x", 16) : std::string("ignored"));
      auto all = rv.all_gather("blob of rank " + std::to_string(r) + std::string(size_t(r) * 1000, char('a' + r)));
      return std::make_pair(b, all);
    }));
  for (int r = 0; r < world; ++r) {
    auto [b, all] = ranks[size_t(r)].get();
    CHECK(b == std::string("id-from-rank-0\0x", 16));
    REQUIRE(all.size() == size_t(world));
    for (int q = 0; q < world; ++q)
      CHECK(all[size_t(q)] == "blob of rank " + std::to_string(q) + std::string(size_t(q) * 1000, char('a' + q)));
  }
}

TEST_CASE("[cpu] rendezvous: a failing rank is reported to every other rank with its message") {
  const int world = 3;
  const std::string addr = "127.0.0.1:" + std::to_string(find_free_port());
  std::vector<std::promise<std::string>> got(world);
  std::vector<std::future<std::string>> seen;
  for (auto& p : got) seen.push_back(p.get_future());
  std::atomic<bool> release{false};
  std::vector<std::thread> th;
  for (int r = 0; r < world; ++r)
    th.emplace_back([&, r] {
      Rendezvous rv(addr, r, world, 20.0);
      rv.broadcast("x");
      std::atomic<bool> fired{false};
      rv.start_monitor([&, r](const std::string& why) {
        fired = true;
        got[size_t(r)].set_value(why);
      });
      if (r == 2) {
        rv.report_failure("disk on fire");
        got[2].set_value("self");
        return;  // destructor: no bye after a failure
      }
      while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      if (!fired) got[size_t(r)].set_value("none");
    });
  for (int r = 0; r < 2; ++r) {
    REQUIRE(seen[size_t(r)].wait_for(std::chrono::seconds(10)) == std::future_status::ready);
    std::string why = seen[size_t(r)].get();
    CHECK(why.find("rank 2") != std::string::npos);
    CHECK(why.find("disk on fire") != std::string::npos);
  }
  release = true;
  for (auto& t : th) t.join();
}

TEST_CASE("[cpu] rendezvous: a rank that disappears without saying bye is detected; a normal end is not a failure") {
  const int world = 2;
  const std::string addr = "127.0.0.1:" + std::to_string(find_free_port());
  std::promise<std::string> p0;
  auto f0 = p0.get_future();
  pid_t child = fork();  // rank 1 is a process that dies without a word (like kill -9)
  if (child == 0) {
    Rendezvous* rv = new Rendezvous(addr, 1, world, 20.0);
    rv->broadcast("");
    _exit(0);
  }
  {
    Rendezvous rv(addr, 0, world, 20.0);
    rv.broadcast("id");
    rv.start_monitor([&](const std::string& why) { p0.set_value(why); });
    REQUIRE(f0.wait_for(std::chrono::seconds(10)) == std::future_status::ready);
    std::string why = f0.get();
    CHECK(why.find("rank 1") != std::string::npos);
    CHECK(why.find("disconnected") != std::string::npos);
  }
  int st = 0;
  waitpid(child, &st, 0);

  // Normal end: both say bye; no failure callback.
  const std::string addr2 = "127.0.0.1:" + std::to_string(find_free_port());
  std::atomic<int> failures{0};
  std::thread t2([&] {
    Rendezvous rv(addr2, 1, world, 20.0);
    rv.broadcast("");
    rv.start_monitor([&](const std::string&) { failures++; });
  });
  {
    Rendezvous rv(addr2, 0, world, 20.0);
    rv.broadcast("id");
    rv.start_monitor([&](const std::string&) { failures++; });
    t2.join();
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  CHECK(failures.load() == 0);
}

TEST_CASE("[cpu] rendezvous: wrong world size and unreachable master give clear errors") {
  const std::string addr = "127.0.0.1:" + std::to_string(find_free_port());
  auto r0 = std::async(std::launch::async, [&] {
    try {
      Rendezvous rv(addr, 0, 2, 10.0);
      return std::string("no error");
    } catch (const Error& e) {
      return std::string(e.what());
    }
  });
  std::string e1;
  try {
    Rendezvous rv(addr, 1, 3, 10.0);
  } catch (const Error& e) {
    e1 = e.what();
  }
  CHECK(r0.get().find("world size is 3") != std::string::npos);
  CHECK(e1.find("refused") != std::string::npos);

  const std::string dead = "127.0.0.1:" + std::to_string(find_free_port());
  try {
    Rendezvous rv(dead, 1, 2, 0.5);
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("cannot reach rank 0") != std::string::npos);
  }
  CHECK_THROWS_AS(parse_host_port("nohostport", nullptr, nullptr), Error);
  std::string h;
  int p = 0;
  parse_host_port("[::1]:1234", &h, &p);
  CHECK(h == "::1");
  CHECK(p == 1234);
}

namespace {
/// Sets environment variables for one scope and restores them after.
struct ScopedEnv {
  std::vector<std::pair<std::string, std::string>> saved;
  std::vector<std::string> unset_after;
  void set(const std::string& k, const std::string& v) {
    const char* old = std::getenv(k.c_str());
    if (old) saved.emplace_back(k, old);
    else unset_after.push_back(k);
    setenv(k.c_str(), v.c_str(), 1);
  }
  ~ScopedEnv() {
    for (auto& [k, v] : saved) setenv(k.c_str(), v.c_str(), 1);
    for (auto& k : unset_after) unsetenv(k.c_str());
  }
};
const char* kAllVars[] = {"TPRUN_RANK", "TPRUN_LOCAL_RANK", "TPRUN_WORLD_SIZE", "TPRUN_LOCAL_WORLD_SIZE", "TPRUN_MASTER",
                          "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                          "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_SIZE",
                          "OMPI_COMM_WORLD_LOCAL_SIZE", "SLURM_PROCID", "SLURM_LOCALID", "SLURM_STEP_NUM_TASKS",
                          "SLURM_NTASKS", "SLURM_STEP_TASKS_PER_NODE", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID",
                          "MPI_LOCALNRANKS"};
struct CleanEnv {
  std::vector<std::pair<std::string, std::string>> saved;
  CleanEnv() {
    for (const char* k : kAllVars)
      if (const char* v = std::getenv(k)) {
        saved.emplace_back(k, v);
        unsetenv(k);
      }
  }
  ~CleanEnv() {
    for (const char* k : kAllVars) unsetenv(k);
    for (auto& [k, v] : saved) setenv(k.c_str(), v.c_str(), 1);
  }
};
}  // namespace

TEST_CASE("[cpu] worker environment of each launcher") {
  CleanEnv clean;
  CHECK_FALSE(read_worker_env().found);
  CHECK_FALSE(is_worker_process());
  {
    ScopedEnv e;
    e.set("TPRUN_RANK", "3");
    e.set("TPRUN_LOCAL_RANK", "1");
    e.set("TPRUN_WORLD_SIZE", "4");
    e.set("TPRUN_LOCAL_WORLD_SIZE", "2");
    e.set("TPRUN_MASTER", "node0:29500");
    WorkerEnv w = read_worker_env();
    CHECK(w.source == "tprun");
    CHECK(w.rank == 3);
    CHECK(w.local_rank == 1);
    CHECK(w.world_size == 4);
    CHECK(w.master_addr == "node0:29500");
  }
  {
    ScopedEnv e;  // torchrun
    e.set("RANK", "1");
    e.set("LOCAL_RANK", "1");
    e.set("WORLD_SIZE", "2");
    e.set("MASTER_ADDR", "10.0.0.1");
    e.set("MASTER_PORT", "1234");
    WorkerEnv w = read_worker_env();
    CHECK(w.source == "torchrun");
    CHECK(w.rank == 1);
    CHECK(w.local_rank == 1);
    CHECK(w.master_addr == "10.0.0.1:1234");
  }
  {
    ScopedEnv e;  // mpirun on one node: default loopback master
    e.set("OMPI_COMM_WORLD_RANK", "2");
    e.set("OMPI_COMM_WORLD_LOCAL_RANK", "2");
    e.set("OMPI_COMM_WORLD_SIZE", "4");
    e.set("OMPI_COMM_WORLD_LOCAL_SIZE", "4");
    WorkerEnv w = read_worker_env();
    CHECK(w.source == "mpirun");
    CHECK(w.rank == 2);
    CHECK(w.master_addr == "127.0.0.1:29517");
  }
  {
    ScopedEnv e;  // an sbatch script (no srun step): not a worker
    e.set("SLURM_PROCID", "0");
    e.set("SLURM_NTASKS", "2");
    CHECK_FALSE(read_worker_env().found);
    e.set("SLURM_STEP_NUM_TASKS", "2");  // inside srun
    e.set("SLURM_LOCALID", "0");
    WorkerEnv w = read_worker_env();
    CHECK(w.source == "srun");
    CHECK(w.world_size == 2);
    CHECK(w.master_addr.empty());  // multi-node unknown: the worker asks for TPRUN_MASTER
    e.set("CUDA_VISIBLE_DEVICES", "3");  // srun --gpus-per-task=1: this task's one GPU
    CHECK(read_worker_env().own_visible_gpu);
    e.set("CUDA_VISIBLE_DEVICES", "0,1");
    CHECK_FALSE(read_worker_env().own_visible_gpu);
  }
  {
    ScopedEnv e;
    e.set("TPRUN_RANK", "x");
    CHECK_THROWS_AS(read_worker_env(), Error);
  }
}
