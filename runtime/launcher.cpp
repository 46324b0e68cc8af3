// launcher.cpp: tprun as a per-node launcher (see launcher.h) and the worker-environment reader.
// The launcher forks one worker per local GPU, re-executing /proc/self/exe with the same argv and
// TPRUN_* variables; rank != 0 gets stdout on /dev/null; every worker's stderr comes back through a pipe
// (lines of rank r prefixed "[rank r] "). The first worker to fail brings the others down (SIGTERM, then
// SIGKILL after a grace period) and is named in the launcher's error. Ctrl-C stops everything.
#include "runtime/launcher.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "format/error.h"
#include "runtime/cluster_env.h"
#include "runtime/rendezvous.h"

namespace tpshard {
namespace {

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return (v && *v) ? v : nullptr;
}

int env_int(const char* name, int fallback) {
  const char* v = env(name);
  if (!v) return fallback;
  char* end = nullptr;
  long x = strtol(v, &end, 10);
  if (*end != '\0' || x < 0 || x > (1 << 20))
    throw Error(std::string("environment variable ") + name + "='" + v + "' is not a non-negative integer",
                "fix or unset it");
  return int(x);
}

constexpr const char* kDefaultLocalMaster = "127.0.0.1:29517";

volatile sig_atomic_t g_signal = 0;
int g_sig_pipe[2] = {-1, -1};

void on_signal(int sig) {
  g_signal = sig;
  char c = 's';
  if (write(g_sig_pipe[1], &c, 1) < 0) { /* nothing to do in a handler */ }
}

struct Child {
  int rank = 0;
  int local_rank = 0;
  pid_t pid = -1;
  int err_fd = -1;         ///< read end of the worker's stderr pipe
  std::string partial;     ///< incomplete last line (ranks != 0)
  std::string last_error;  ///< last "error: ..." line and the "hint: ..." after it
  bool capture_hint = false;
  bool exited = false;
  int status = 0;
  bool stopped_by_us = false;  ///< exited after the launcher began stopping the job
};

void take_line(Child& c, const std::string& line) {
  if (line.rfind("error:", 0) == 0 || line.find("] error:") != std::string::npos) {
    c.last_error = line;
    c.capture_hint = true;
  } else if (c.capture_hint && line.rfind("hint:", 0) == 0) {
    c.last_error += "\n" + line;
    c.capture_hint = false;
  } else {
    c.capture_hint = false;
  }
}

/// Forward what the worker wrote to stderr (non-blocking fd): rank 0 as is, others line by line with
/// "[rank r] ". Closes the fd at end of file.
void pump(Child& c) {
  char buf[65536];
  for (;;) {
    ssize_t n = read(c.err_fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (n <= 0) {  // end of file (or a broken pipe): flush the last partial line
      if (!c.partial.empty()) {
        if (c.rank != 0) {
          std::string out = "[rank " + std::to_string(c.rank) + "] " + c.partial + "\n";
          if (write(2, out.data(), out.size()) < 0) {}
        }
        take_line(c, c.partial);
        c.partial.clear();
      }
      close(c.err_fd);
      c.err_fd = -1;
      return;
    }
    if (c.rank == 0 && write(2, buf, size_t(n)) < 0) {}
    c.partial.append(buf, size_t(n));
    size_t nl;
    while ((nl = c.partial.find('\n')) != std::string::npos) {
      std::string line = c.partial.substr(0, nl);
      c.partial.erase(0, nl + 1);
      if (c.rank != 0) {
        std::string out = "[rank " + std::to_string(c.rank) + "] " + line + "\n";
        if (write(2, out.data(), out.size()) < 0) {}
      }
      take_line(c, line);
    }
    if (c.partial.size() > 65536) c.partial.clear();  // a progress line without newline
  }
}

std::string describe_status(int status) {
  if (WIFEXITED(status)) return "exit code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    int s = WTERMSIG(status);
    return "signal " + std::to_string(s) + " (" + strsignal(s) + ")";
  }
  return "status " + std::to_string(status);
}

bool failed(int status) { return !(WIFEXITED(status) && WEXITSTATUS(status) == 0); }

}  // namespace

WorkerEnv read_worker_env() {
  WorkerEnv w;
  if (env("TPRUN_RANK")) {
    w.found = true;
    w.source = "tprun";
    w.rank = env_int("TPRUN_RANK", 0);
    w.local_rank = env_int("TPRUN_LOCAL_RANK", w.rank);
    w.world_size = env_int("TPRUN_WORLD_SIZE", 1);
    w.local_world_size = env_int("TPRUN_LOCAL_WORLD_SIZE", w.world_size);
    if (env("TPRUN_MASTER")) w.master_addr = env("TPRUN_MASTER");
    return w;
  }
  if (env("RANK") && env("WORLD_SIZE") && env_int("WORLD_SIZE", 1) > 1) {
    w.source = "torchrun";
    w.rank = env_int("RANK", 0);
    w.world_size = env_int("WORLD_SIZE", 1);
    w.local_rank = env_int("LOCAL_RANK", w.rank);
    w.local_world_size = env_int("LOCAL_WORLD_SIZE", w.world_size);
  } else if (env("OMPI_COMM_WORLD_RANK") && env_int("OMPI_COMM_WORLD_SIZE", 1) > 1) {
    w.source = "mpirun";
    w.rank = env_int("OMPI_COMM_WORLD_RANK", 0);
    w.world_size = env_int("OMPI_COMM_WORLD_SIZE", 1);
    w.local_rank = env_int("OMPI_COMM_WORLD_LOCAL_RANK", w.rank);
    w.local_world_size = env_int("OMPI_COMM_WORLD_LOCAL_SIZE", w.world_size);
  } else if (env("SLURM_PROCID") && env_int("SLURM_STEP_NUM_TASKS", 1) > 1) {
    // SLURM_STEP_NUM_TASKS is set by srun only (an sbatch script also has SLURM_PROCID / SLURM_NTASKS).
    w.source = "srun";
    w.rank = env_int("SLURM_PROCID", 0);
    w.world_size = env_int("SLURM_STEP_NUM_TASKS", 1);
    w.local_rank = env_int("SLURM_LOCALID", w.rank);
    // "4(x2)" or "4,3": the entry of this node (SLURM_NODEID, the node's index in the step).
    const char* per_node = env("SLURM_STEP_TASKS_PER_NODE");
    w.local_world_size = slurm_tasks_on_node(per_node ? per_node : "", env_int("SLURM_NODEID", 0));
    if (env_int("SLURM_STEP_NUM_NODES", 0) == 1) w.local_world_size = w.world_size;
    // 0: unknown, not needed except for the default master (a one-node step then meets on loopback)
  } else if (env("PMI_RANK") && env_int("PMI_SIZE", 1) > 1) {
    w.source = "pmi";
    w.rank = env_int("PMI_RANK", 0);
    w.world_size = env_int("PMI_SIZE", 1);
    w.local_rank = env("MPI_LOCALRANKID") ? env_int("MPI_LOCALRANKID", 0) : env_int("PMI_LOCAL_RANK", w.rank);
    w.local_world_size = env("MPI_LOCALNRANKS") ? env_int("MPI_LOCALNRANKS", 0) : env_int("PMI_LOCAL_SIZE", 0);
  } else {
    return w;
  }
  w.found = true;
  if (const char* v = env("CUDA_VISIBLE_DEVICES")) {
    const std::string list = v;
    w.own_visible_gpu = !list.empty() && list.find(',') == std::string::npos;
  }
  if (env("TPRUN_MASTER")) {
    w.master_addr = env("TPRUN_MASTER");
  } else if (env("MASTER_ADDR")) {
    int port = env_int("MASTER_PORT", 29500);
    // torchrun's own store (the elastic agent's TCPStore) already listens on MASTER_PORT: take the next.
    if (w.source == "torchrun" && env("TORCHELASTIC_RUN_ID")) ++port;
    w.master_addr = std::string(env("MASTER_ADDR")) + ":" + std::to_string(port);
  } else if (w.source == "srun") {
    // Rank 0 runs on the step's first node; every task derives the same port from the step's reserved
    // ports, else from the job and step ids (two steps of one job may run at the same time).
    const char* nodes = env("SLURM_STEP_NODELIST") ? env("SLURM_STEP_NODELIST") : env("SLURM_JOB_NODELIST");
    auto str = [](const char* name) { return std::string(env(name) ? env(name) : ""); };
    const int port = slurm_master_port(str("SLURM_JOB_ID"), str("SLURM_STEP_ID"), str("SLURM_STEP_RESV_PORTS"));
    if (w.local_world_size == w.world_size) {
      w.master_addr = "127.0.0.1:" + std::to_string(port);
    } else if (nodes) {
      w.master_addr = expand_slurm_hostlist(nodes).front() + ":" + std::to_string(port);
    }
  } else if (w.source == "mpirun") {
    const int port = ompi_master_port(env("OMPI_MCA_ess_base_jobid") ? env("OMPI_MCA_ess_base_jobid") : "");
    const std::string hnp = ompi_hnp_host(env("OMPI_MCA_orte_hnp_uri") ? env("OMPI_MCA_orte_hnp_uri") : "");
    if (w.local_world_size == w.world_size) {
      w.master_addr = "127.0.0.1:" + std::to_string(port);
    } else if (!hnp.empty()) {
      w.master_addr = hnp + ":" + std::to_string(port);  // mpirun's own host: rank 0 runs there
    }
  } else if (w.local_world_size == w.world_size) {
    w.master_addr = kDefaultLocalMaster;
  }
  return w;
}

bool is_worker_process() { return read_worker_env().found; }

bool is_node_launcher(const WorkerEnv& env, const SessionOptions& opts) {
  const int world = opts.dp_size * opts.pp_size * opts.tp_size;
  return env.found && env.source != "tprun" && opts.nnodes > 1 && env.world_size == opts.nnodes && world != opts.nnodes;
}

bool is_rank_process(const SessionOptions& opts) {
  const WorkerEnv env = read_worker_env();
  return env.found && !is_node_launcher(env, opts);
}

int launch_workers_if_needed(int argc, char** argv, const SessionOptions& opts) {
  (void)argc;
  const WorkerEnv launched_by = read_worker_env();
  const bool node_launcher = is_node_launcher(launched_by, opts);
  if (launched_by.found && !node_launcher) return -1;
  const bool processes = opts.device == Device::Cuda || opts.cpu_processes || opts.nnodes > 1;
  if (opts.device == Device::Auto || !processes) return -1;
  const int nnodes = std::max(1, opts.nnodes);
  const int world = opts.dp_size * opts.pp_size * opts.tp_size;  // ranks by dp_rank, pp_stage, tp_rank
  TPS_CHECK(opts.tp_size >= 1 && world % nnodes == 0,
            "--tp x --pp x --dp = " + std::to_string(world) + " ranks is not a multiple of --nnodes " + std::to_string(nnodes),
            "the ranks span all nodes with the same number of GPUs on each: ranks = nnodes x GPUs per node");
  TPS_CHECK(opts.node_rank >= 0 && opts.node_rank < nnodes,
            "--node-rank " + std::to_string(opts.node_rank) + " is outside 0.." + std::to_string(nnodes - 1),
            "number the nodes 0..nnodes-1, with 0 on the --master-addr host");
  const int local = world / nnodes;
  if (nnodes == 1 && local == 1) return -1;  // one rank: run in this process
  // One tprun per node under srun / mpirun / torchrun: the node's index and the rendezvous come from it.
  const int node_rank = node_launcher ? launched_by.rank : opts.node_rank;
  std::string master = opts.master_addr;
  if (master.empty() && node_launcher) {
    master = launched_by.master_addr;
    TPS_CHECK(!master.empty(), "one tprun per node under " + launched_by.source + ": no rendezvous address",
              "export TPRUN_MASTER=HOST:PORT (the host of the first node) to every task (mpirun -x TPRUN_MASTER), "
              "or pass --master-addr");
  }
  if (master.empty()) {
    TPS_CHECK(nnodes == 1, "--nnodes " + std::to_string(nnodes) + " needs --master-addr HOST:PORT",
              "pass the address of the --node-rank 0 host, e.g. --master-addr node0:29500, to every node");
    master = "127.0.0.1:" + std::to_string(find_free_port());
  } else {
    std::string h;
    int p;
    parse_host_port(master, &h, &p);
  }

  if (pipe2(g_sig_pipe, O_CLOEXEC) != 0) throw Error("launcher: pipe failed", "check the system limits");
  fcntl(g_sig_pipe[0], F_SETFL, O_NONBLOCK);
  fcntl(g_sig_pipe[1], F_SETFL, O_NONBLOCK);
  struct sigaction sa{};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  struct sigaction old_int{}, old_term{}, old_hup{};
  sigaction(SIGINT, &sa, &old_int);
  sigaction(SIGTERM, &sa, &old_term);
  sigaction(SIGHUP, &sa, &old_hup);
  fflush(stdout);
  fflush(stderr);

  std::vector<Child> kids(static_cast<size_t>(local));
  for (int l = 0; l < local; ++l) {
    Child& c = kids[size_t(l)];
    c.local_rank = l;
    c.rank = node_rank * local + l;
    int errp[2];
    if (pipe2(errp, O_CLOEXEC) != 0) throw Error("launcher: pipe failed", "check the system limits");
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) throw Error(std::string("launcher: fork failed: ") + strerror(errno), "check the system limits");
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);  // the launcher died: so do we
      if (getppid() != parent) _exit(kExitPeerFailed);
      signal(SIGINT, SIG_DFL);
      signal(SIGTERM, SIG_DFL);
      signal(SIGHUP, SIG_DFL);
      dup2(errp[1], 2);
      close(errp[0]);
      close(errp[1]);
      if (c.rank != 0) {
        int devnull = open("/dev/null", O_WRONLY);
        if (devnull >= 0) dup2(devnull, 1);
      }
      setenv("TPRUN_RANK", std::to_string(c.rank).c_str(), 1);
      setenv("TPRUN_LOCAL_RANK", std::to_string(l).c_str(), 1);
      setenv("TPRUN_WORLD_SIZE", std::to_string(world).c_str(), 1);
      setenv("TPRUN_LOCAL_WORLD_SIZE", std::to_string(local).c_str(), 1);
      setenv("TPRUN_MASTER", master.c_str(), 1);
      setenv("NCCL_NVLS_ENABLE", "0", 0);
      execv("/proc/self/exe", argv);
      std::string msg = std::string("error: launcher: cannot exec /proc/self/exe: ") + strerror(errno) + "\n";
      if (write(2, msg.data(), msg.size()) < 0) {}
      _exit(127);
    }
    close(errp[1]);
    fcntl(errp[0], F_SETFL, O_NONBLOCK);
    c.pid = pid;
    c.err_fd = errp[0];
  }

  // Watch: forward stderr, reap children, stop all on the first failure or on a signal.
  using Clock = std::chrono::steady_clock;
  bool stopping = false;
  Clock::time_point stop_time{};
  int first_failed = -1;
  int interrupted = 0;
  std::vector<size_t> exit_order;
  bool grace_started = false;
  Clock::time_point grace_end{};
  auto stop_all = [&](int sig) {
    for (auto& c : kids)
      if (!c.exited) kill(c.pid, sig);
  };
  for (;;) {
    std::vector<pollfd> pfds{{g_sig_pipe[0], POLLIN, 0}};
    std::vector<size_t> which{size_t(-1)};
    for (size_t i = 0; i < kids.size(); ++i)
      if (kids[i].err_fd >= 0) {
        pfds.push_back({kids[i].err_fd, POLLIN, 0});
        which.push_back(i);
      }
    bool all_exited = true;
    for (auto& c : kids) all_exited = all_exited && c.exited;
    if (all_exited && pfds.size() == 1) break;
    int pr = poll(pfds.data(), nfds_t(pfds.size()), 100);
    if (pr > 0) {
      if (pfds[0].revents) {
        char buf[64];
        while (read(g_sig_pipe[0], buf, sizeof(buf)) > 0) {}
      }
      for (size_t k = 1; k < pfds.size(); ++k)
        if (pfds[k].revents) pump(kids[which[k]]);
    }
    if (g_signal && !interrupted) {
      interrupted = g_signal;
      std::string msg = "tprun: " + std::string(strsignal(interrupted)) + ": stopping all ranks\n";
      if (write(2, msg.data(), msg.size()) < 0) {}
      stop_all(interrupted);  // the signal itself: a worker's own message (serve's drain) then names the same one
      stopping = true;
      stop_time = Clock::now();
    }
    for (size_t i = 0; i < kids.size(); ++i) {
      Child& c = kids[i];
      if (c.exited) continue;
      int st = 0;
      pid_t r = waitpid(c.pid, &st, WNOHANG);
      if (r != c.pid) continue;
      c.exited = true;
      c.status = st;
      c.stopped_by_us = stopping;
      exit_order.push_back(i);
      if (failed(st) && !stopping) {
        if (WIFEXITED(st) && WEXITSTATUS(st) == kExitPeerFailed) {
          // It stopped because another rank failed: give that rank a moment to exit with its own message.
          if (!grace_started) {
            grace_started = true;
            grace_end = Clock::now() + std::chrono::seconds(3);
            first_failed = int(i);
          }
        } else {
          first_failed = int(i);
          stop_all(SIGTERM);
          stopping = true;
          stop_time = Clock::now();
        }
      }
    }
    if (grace_started && !stopping && Clock::now() > grace_end) {
      stop_all(SIGTERM);
      stopping = true;
      stop_time = Clock::now();
    }
    // After a signal the workers get opts.interrupt_grace_s (serve drains its requests in flight);
    // after a failure, 5 s.
    const int grace_s = interrupted && first_failed < 0 ? std::max(5, opts.interrupt_grace_s) : 5;
    if (stopping && Clock::now() - stop_time > std::chrono::seconds(grace_s)) stop_all(SIGKILL);
  }
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);
  sigaction(SIGHUP, &old_hup, nullptr);
  close(g_sig_pipe[0]);
  close(g_sig_pipe[1]);

  if (interrupted) {
    // Workers that handle the signal themselves (serve drains, then exits 0): their success is the job's.
    bool all_ok = true;
    for (const auto& c : kids) all_ok = all_ok && WIFEXITED(c.status) && WEXITSTATUS(c.status) == 0;
    return all_ok ? 0 : 128 + interrupted;
  }
  if (first_failed < 0) return 0;
  // Name the rank that failed by itself: the first to exit with a failure that is neither "a peer failed"
  // (kExitPeerFailed) nor our own SIGTERM/SIGKILL; else the first failure seen.
  const Child* culprit = &kids[size_t(first_failed)];
  for (size_t i : exit_order) {
    const Child& c = kids[i];
    bool peer = WIFEXITED(c.status) && WEXITSTATUS(c.status) == kExitPeerFailed;
    bool ours = c.stopped_by_us && WIFSIGNALED(c.status);
    if (failed(c.status) && !peer && !ours) {
      culprit = &c;
      break;
    }
  }
  std::string detail = culprit->last_error;
  if (detail.rfind("error: ", 0) == 0) detail = detail.substr(7);
  std::string msg;
  if (WIFEXITED(culprit->status) && WEXITSTATUS(culprit->status) == kExitPeerFailed) {
    // Only "a peer failed" here: the failing rank runs on another node; its message came through rank 0.
    msg = "error: stopped because another rank failed" + (detail.empty() ? std::string() : ": " + detail);
  } else {
    msg = "error: rank " + std::to_string(culprit->rank) + " of " + std::to_string(world) + " (local rank " +
          std::to_string(culprit->local_rank) + ", pid " + std::to_string(culprit->pid) + ") failed with " +
          describe_status(culprit->status) + (detail.empty() ? std::string() : ": " + detail);
  }
  msg += "\n";
  if (culprit->last_error.find("\nhint:") == std::string::npos)
    msg += "hint: the other ranks were stopped; its full output is above, prefixed [rank " +
           std::to_string(culprit->rank) + "]\n";
  if (write(2, msg.data(), msg.size()) < 0) {}
  return 1;
}

}  // namespace tpshard
