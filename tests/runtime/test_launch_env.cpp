// test_launch_env.cpp: the cluster launchers' environment as tprun reads it: the Slurm hostlist syntax and
// port rule, Open MPI's mpirun host and port, torchrun's port clash, one tprun per node under srun / mpirun
// (runtime/cluster_env.h, runtime/launcher.h), OMP_NUM_THREADS as the thread hint (runtime/cpu_budget.h).
#include <doctest/doctest.h>

#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "format/error.h"
#include "runtime/cluster_env.h"
#include "runtime/cpu_budget.h"
#include "runtime/launcher.h"
#include "runtime/tuning.h"

using namespace tpshard;

namespace {
/// Unsets every launcher variable for one scope, sets the given ones, restores all after.
struct LauncherEnv {
  std::vector<std::pair<std::string, std::string>> saved;
  LauncherEnv() {
    for (const char* k : kVars)
      if (const char* v = std::getenv(k)) {
        saved.emplace_back(k, v);
        unsetenv(k);
      }
  }
  void set(const char* k, const char* v) { setenv(k, v, 1); }
  ~LauncherEnv() {
    for (const char* k : kVars) unsetenv(k);
    for (auto& [k, v] : saved) setenv(k.c_str(), v.c_str(), 1);
  }
  static constexpr const char* kVars[] = {
      "TPRUN_RANK", "TPRUN_LOCAL_RANK", "TPRUN_WORLD_SIZE", "TPRUN_LOCAL_WORLD_SIZE", "TPRUN_MASTER", "RANK",
      "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID",
      "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE",
      "OMPI_MCA_ess_base_jobid", "OMPI_MCA_orte_hnp_uri", "SLURM_PROCID", "SLURM_LOCALID", "SLURM_STEP_NUM_TASKS",
      "SLURM_NTASKS", "SLURM_STEP_TASKS_PER_NODE", "SLURM_STEP_NUM_NODES", "SLURM_STEP_NODELIST",
      "SLURM_JOB_NODELIST", "SLURM_JOB_ID", "SLURM_STEP_ID", "SLURM_NODEID", "SLURM_STEP_RESV_PORTS", "PMI_RANK",
      "PMI_SIZE", "CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS"};
};

SessionOptions layout(int tp, int pp, int nnodes) {
  SessionOptions o;
  o.tp_size = tp;
  o.pp_size = pp;
  o.nnodes = nnodes;
  return o;
}
}  // namespace

TEST_CASE("Slurm hostlists expand in order, keeping zero padding; malformed ones are named") {
  using V = std::vector<std::string>;
  CHECK(expand_slurm_hostlist("node[01-03,07]") == V{"node01", "node02", "node03", "node07"});
  CHECK(expand_slurm_hostlist("a,b") == V{"a", "b"});
  CHECK(expand_slurm_hostlist("gpu[8-10],login") == V{"gpu8", "gpu9", "gpu10", "login"});
  CHECK(expand_slurm_hostlist("n[098-101]") == V{"n098", "n099", "n100", "n101"});
  CHECK(expand_slurm_hostlist("rack[1-2]-n[1-2]") == V{"rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"});
  CHECK(expand_slurm_hostlist("localhost") == V{"localhost"});
  CHECK_THROWS_AS(expand_slurm_hostlist("node[01-03"), Error);
  CHECK_THROWS_AS(expand_slurm_hostlist("node[3-1]"), Error);
  CHECK_THROWS_AS(expand_slurm_hostlist("node[a-b]"), Error);
  CHECK_THROWS_AS(expand_slurm_hostlist(""), Error);
  try {
    expand_slurm_hostlist("node[01-03");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("node[01-03") != std::string::npos);
    CHECK(e.hint().find("TPRUN_MASTER") != std::string::npos);
  }
}

TEST_CASE("launcher ports: Slurm reserved ports, else job and step id; Open MPI 20000 + jobid mod 10000") {
  CHECK(slurm_master_port("1234567") == 15000 + 5670);
  CHECK(slurm_master_port("1234567", "0") == 15000 + 5670);
  CHECK(slurm_master_port("1234567", "3") == 15000 + 5673);  // a second step of the job at the same time
  CHECK(slurm_master_port("1234567", "13") == 15000 + 5673);
  CHECK(slurm_master_port("999", "9") == 24999);
  CHECK(slurm_master_port("42", "1") == 15421);
  CHECK(slurm_master_port("42", "batch") == 15420);
  CHECK(slurm_master_port("") == 29517);
  CHECK(slurm_master_port("12_3") == 29517);
  // MpiParams=ports=...: the step's reserved ports, in every form srun writes them
  CHECK(slurm_master_port("42", "1", "12000-12002") == 12000);
  CHECK(slurm_master_port("42", "1", "12007") == 12007);
  CHECK(slurm_master_port("42", "1", "12005,12010-12011") == 12005);
  CHECK(slurm_master_port("", "", "12005") == 12005);
  CHECK(slurm_master_port("42", "1", "junk") == 15421);
  CHECK(slurm_master_port("42", "1", "99999") == 15421);
  // SLURM_STEP_TASKS_PER_NODE at SLURM_NODEID
  CHECK(slurm_tasks_on_node("4", 0) == 4);
  CHECK(slurm_tasks_on_node("4", 1) == 0);
  CHECK(slurm_tasks_on_node("2(x3)", 2) == 2);
  CHECK(slurm_tasks_on_node("2(x3)", 3) == 0);
  CHECK(slurm_tasks_on_node("3,2", 1) == 2);
  CHECK(slurm_tasks_on_node("2(x2),1", 1) == 2);
  CHECK(slurm_tasks_on_node("2(x2),1", 2) == 1);
  CHECK(slurm_tasks_on_node("", 0) == 0);
  CHECK(slurm_tasks_on_node("2(x", 0) == 0);
  CHECK(slurm_tasks_on_node("2(3)", 0) == 0);
  CHECK(slurm_tasks_on_node("a", 0) == 0);
  CHECK(ompi_master_port("1249968129") == 20000 + 8129);
  CHECK(ompi_master_port("") == 29517);
  CHECK(ompi_hnp_host("1249968128.0;tcp://192.0.2.2,10.1.1.1:42851;tcp6://[fd00::2]:51995") == "192.0.2.2");
  CHECK(ompi_hnp_host("1.0;tcp6://[fd00::2]:51995") == "[fd00::2]");
  CHECK(ompi_hnp_host("garbage") == "");
}

TEST_CASE("srun: master on the step's first node with the job's port; one node: loopback") {
  LauncherEnv e;
  e.set("SLURM_PROCID", "3");
  e.set("SLURM_LOCALID", "1");
  e.set("SLURM_STEP_NUM_TASKS", "4");
  e.set("SLURM_STEP_TASKS_PER_NODE", "2(x2)");
  e.set("SLURM_STEP_NUM_NODES", "2");
  e.set("SLURM_STEP_NODELIST", "gpu[07-08]");
  e.set("SLURM_JOB_NODELIST", "gpu[01-08]");
  e.set("SLURM_JOB_ID", "98765");
  e.set("SLURM_STEP_ID", "2");
  e.set("SLURM_NODEID", "1");
  WorkerEnv w = read_worker_env();
  CHECK(w.source == "srun");
  CHECK(w.rank == 3);
  CHECK(w.local_rank == 1);
  CHECK(w.local_world_size == 2);
  CHECK(w.master_addr == "gpu07:22652");
  e.set("SLURM_STEP_TASKS_PER_NODE", "3,1");  // uneven: this node's count
  CHECK(read_worker_env().local_world_size == 1);
  e.set("SLURM_STEP_TASKS_PER_NODE", "2(x2)");
  e.set("SLURM_STEP_RESV_PORTS", "31000-31004");  // MpiParams=ports=...: the step's reserved ports
  CHECK(read_worker_env().master_addr == "gpu07:31000");
  e.set("SLURM_STEP_RESV_PORTS", "");
  e.set("CUDA_VISIBLE_DEVICES", "1");  // --gpus-per-task=1: its only GPU is device 0 whatever the local rank
  CHECK(read_worker_env().own_visible_gpu);
  e.set("SLURM_STEP_NUM_NODES", "1");
  e.set("SLURM_STEP_TASKS_PER_NODE", "4");
  CHECK(read_worker_env().master_addr == "127.0.0.1:22652");
  e.set("TPRUN_MASTER", "head:1");  // an explicit address wins (TPRUN_RANK is what makes a tprun worker)
  CHECK(read_worker_env().master_addr == "head:1");
}

TEST_CASE("mpirun: master on mpirun's host across nodes; torchrun: the port after its store's") {
  {
    LauncherEnv e;
    e.set("OMPI_COMM_WORLD_RANK", "5");
    e.set("OMPI_COMM_WORLD_LOCAL_RANK", "1");
    e.set("OMPI_COMM_WORLD_SIZE", "8");
    e.set("OMPI_COMM_WORLD_LOCAL_SIZE", "4");
    e.set("OMPI_MCA_ess_base_jobid", "1249968129");
    e.set("OMPI_MCA_orte_hnp_uri", "1249968128.0;tcp://10.0.0.1:42851");
    const WorkerEnv w = read_worker_env();
    CHECK(w.source == "mpirun");
    CHECK(w.master_addr == "10.0.0.1:28129");
  }
  {
    LauncherEnv e;
    e.set("RANK", "1");
    e.set("LOCAL_RANK", "1");
    e.set("WORLD_SIZE", "2");
    e.set("MASTER_ADDR", "10.0.0.1");
    e.set("MASTER_PORT", "29500");
    CHECK(read_worker_env().master_addr == "10.0.0.1:29500");  // another launcher exporting torch's names
    e.set("TORCHELASTIC_RUN_ID", "none");                      // torchrun: its store holds MASTER_PORT
    CHECK(read_worker_env().master_addr == "10.0.0.1:29501");
  }
}

TEST_CASE("one tprun per node under srun / mpirun is a node launcher, not a rank") {
  LauncherEnv e;
  e.set("SLURM_PROCID", "1");
  e.set("SLURM_STEP_NUM_TASKS", "2");
  const WorkerEnv w = read_worker_env();
  CHECK(is_node_launcher(w, layout(4, 1, 2)));         // srun -N 2 --ntasks-per-node=1 tprun --tp 4 --nnodes 2
  CHECK_FALSE(is_node_launcher(w, layout(2, 1, 2)));   // one rank per node: the task is the rank
  CHECK_FALSE(is_node_launcher(w, layout(2, 1, 1)));   // srun -n 2 tprun --tp 2
  CHECK(is_rank_process(layout(2, 1, 1)));
  CHECK_FALSE(is_rank_process(layout(2, 3, 2)));
}

TEST_CASE("threads per rank: OMP_NUM_THREADS as a hint capped at the usable CPUs, else an even share") {
  LauncherEnv e;
  const int cpus = usable_cpus();
  CHECK(threads_per_rank(1, 0) == cpus);
  CHECK(threads_per_rank(cpus + 1, 0) == 1);
  CHECK(threads_per_rank(1, 1) == 1);
  CHECK(threads_per_rank(1, 100000) == cpus);
  // OMP_NUM_THREADS as runtime/tuning.cpp reads it: the first level of a nested list; junk is ignored
  auto omp = [](const char* value) {
    return parse_tuning([value](const char* name) -> const char* {
             return std::string(name) == "OMP_NUM_THREADS" ? value : nullptr;
           }).omp_num_threads;
  };
  CHECK(omp("1") == 1);
  CHECK(omp("4,2") == 4);
  CHECK(omp("junk") == 0);
  CHECK(omp("-3") == 0);
  CHECK(omp(nullptr) == 0);
  CHECK_FALSE(affinity_mask_string().empty());
}
