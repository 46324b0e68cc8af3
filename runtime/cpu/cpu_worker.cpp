// cpu_worker.cpp: run_cpu_worker (cpu_worker.h). Control flow of one process: identity -> world
// rendezvous -> CPU sharing count -> group addresses -> liveness monitor -> a GlooComm per tp group and
// stage pair, exchanges for the replica groups -> shard -> runner -> fn(ctx).
#include "runtime/cpu/cpu_worker.h"

#include <csignal>

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/log.h"
#include "format/error.h"
#include "model/parallel_layout.h"
#include "runtime/cpu/comm_stage_link.h"
#include "runtime/cpu/cpu_rank.h"
#include "runtime/cpu/gloo_comm.h"
#include "runtime/cpu/thread_pool.h"
#include "runtime/cpu_budget.h"
#include "runtime/host_exchange.h"
#include "runtime/launcher.h"
#include "runtime/rank_groups.h"
#include "runtime/rendezvous.h"
#include "runtime/tuning.h"

namespace tpshard::cpu {
namespace {

std::string host_name() {
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  return host;
}

/// The rendezvous, communicators and exchanges of this process, in destruction order (communicators
/// before the rendezvous they were set up through).
struct ProcessGroups {
  std::unique_ptr<Rendezvous> world;
  std::vector<std::unique_ptr<Rendezvous>> meetings;
  std::unique_ptr<HostExchange> replicas;       ///< dp_size > 1, output ranks of the replicas only
  std::unique_ptr<HostExchange> replica_ranks;  ///< every rank of this replica
  std::unique_ptr<GlooComm> to_prev_stage, to_next_stage, comm;
  int ranks_sharing_cpus = 1;                   ///< ranks of this host with this process's affinity mask

  ~ProcessGroups() {
    to_prev_stage.reset();
    to_next_stage.reset();
    comm.reset();
    replicas.reset();
    replica_ranks.reset();
    meetings.clear();
    world.reset();
  }
};

void meet(ProcessGroups& pg, const WorkerEnv& env, const RankGrid& grid, const std::string& master, double timeout) {
  pg.world = std::make_unique<Rendezvous>(master, env.rank, env.world_size, timeout);
  // Which ranks share this host's CPUs: same host, same affinity mask (mpirun --bind-to core gives each
  // rank its own cores; tprun's launcher and an unbound srun give all of them the node's).
  const std::string me = host_name() + " " + affinity_mask_string();
  pg.ranks_sharing_cpus = 0;
  for (const std::string& other : pg.world->all_gather(me)) pg.ranks_sharing_cpus += other == me ? 1 : 0;
  const std::vector<RankGroup> groups = job_groups(grid);
  const std::vector<std::string> addresses = exchange_group_addresses(*pg.world, groups);
  const int rank = env.rank;
  pg.world->start_monitor([rank](const std::string& why) {
    std::string msg = "error: rank " + std::to_string(rank) + " stopping: " + why + "\n";
    if (write(2, msg.data(), msg.size()) < 0) {}
    _exit(kExitPeerFailed);
  });
  // Every group of this rank, in the one order of job_groups (rank_groups.h: no deadlock).
  for (size_t i = 0; i < groups.size(); ++i) {
    const RankGroup& g = groups[i];
    const int index = g.index_of(rank);
    if (index < 0) continue;
    const double group_timeout = g.kind == GroupKind::Replicas ? kReplicaRoundTimeoutS : timeout;
    pg.meetings.push_back(meet_group(g, addresses[i], rank, group_timeout));
    Rendezvous& meeting = *pg.meetings.back();
    if (g.kind == GroupKind::Replicas) {
      pg.replicas = std::make_unique<RendezvousExchange>(meeting);
    } else if (g.kind == GroupKind::ReplicaRanks) {
      pg.replica_ranks = std::make_unique<RendezvousExchange>(meeting);
    } else {
      RendezvousExchange exchange(meeting);
      auto comm = std::make_unique<GlooComm>(exchange, g.name, timeout);
      if (g.kind == GroupKind::TensorParallel) pg.comm = std::move(comm);
      else if (index == 0) pg.to_next_stage = std::move(comm);
      else pg.to_prev_stage = std::move(comm);
    }
  }
}

}  // namespace

void run_cpu_worker(const SessionOptions& opts, const std::function<void(RankContext&)>& fn) {
  TPS_CHECK(gloo_available(), "the CPU backend with one process per rank needs gloo, and this tprun was built without it",
            "install libgloo-dev (scripts/install_deps.sh does) and reconfigure, or run the CPU ranks as threads of "
            "one process (no --cpu-processes / --nnodes, no cluster launcher)");
  // gloo's TCP transport writes without MSG_NOSIGNAL: a dead peer would kill this rank with SIGPIPE before
  // it can say which rank went away. Ignored, the write fails with EPIPE and the communicator reports it.
  ::signal(SIGPIPE, SIG_IGN);
  WorkerEnv env = read_worker_env();
  if (!env.found) env.world_size = env.local_world_size = 1;
  RankGrid grid;
  grid.dp_size = opts.dp_size;
  grid.pp_size = opts.pp_size;
  grid.tp_size = opts.tp_size;
  const std::string layout_flags = "--tp " + std::to_string(opts.tp_size) +
                                   (opts.pp_size > 1 ? " --pp " + std::to_string(opts.pp_size) : std::string()) +
                                   (opts.dp_size > 1 ? " --dp " + std::to_string(opts.dp_size) : std::string());
  TPS_CHECK(env.world_size == grid.world_size(),
            "rank " + std::to_string(env.rank) + ": the launcher (" + (env.source.empty() ? "none" : env.source) +
                ") started " + std::to_string(env.world_size) + " processes but " + layout_flags + " needs " +
                std::to_string(grid.world_size()),
            "start exactly one process per rank (e.g. mpirun -np " + std::to_string(grid.world_size()) +
                "), or one per node with --nnodes, or let tprun start them: tprun MODEL --device cpu --cpu-processes " +
                layout_flags + " ...");
  if (env.rank != 0) {  // only rank 0 writes to stdout
    std::fflush(stdout);
    const int devnull = open("/dev/null", O_WRONLY);
    if (devnull >= 0) {
      dup2(devnull, 1);
      close(devnull);
    }
  }
  const double timeout = tuning().nccl_timeout_s;
  ProcessGroups pg;
  if (env.world_size > 1) {
    std::string master = opts.master_addr.empty() ? env.master_addr : opts.master_addr;
    if (env.source == "tprun") master = env.master_addr;  // the launcher resolved it
    TPS_CHECK(!master.empty(),
              "rank " + std::to_string(env.rank) + ": no rendezvous address for a multi-node " + env.source + " job",
              "export TPRUN_MASTER=HOST:PORT (rank 0's host) or MASTER_ADDR/MASTER_PORT (mpirun: -x TPRUN_MASTER), "
              "or pass --master-addr");
    meet(pg, env, grid, master, timeout);
  }
  if (!pg.replica_ranks) pg.replica_ranks = std::make_unique<SingleExchange>();
  if (!pg.comm) {
    SingleExchange single;
    pg.comm = std::make_unique<GlooComm>(single, "tp group", timeout);
  }
  const RankCoord me = grid.coord(env.rank);
  try {
    const Manifest manifest = load_manifest(opts.model_dir);
    const ParallelLayout layout = make_parallel_layout(manifest.model, opts.tp_size, opts.pp_size, opts.dp_size);
    const int max_seq_len = effective_max_seq_len(opts, manifest.model);
    const int max_batch = opts.max_batch > 0 ? opts.max_batch : kDefaultCpuMaxBatch;
    const std::unique_ptr<Tokenizer> tokenizer = load_model_tokenizer(opts.model_dir, manifest.model);
    const int threads = opts.cpu_threads > 0 ? opts.cpu_threads : threads_per_rank(std::max(1, pg.ranks_sharing_cpus));
    if (!opts.quiet && env.rank == 0) {
      std::string grid_text = "tp_size " + std::to_string(opts.tp_size);
      if (opts.pp_size > 1) grid_text += ", pp_size " + std::to_string(opts.pp_size);
      if (opts.dp_size > 1) grid_text += ", dp_size " + std::to_string(opts.dp_size);
      log_line(LogLevel::Info, "tprun: backend cpu (fp32), %s, one process per rank (%s, gloo), %d thread%s per rank\n",
               grid_text.c_str(), env.source.c_str(), threads, threads == 1 ? "" : "s");
    }
    ThreadPool pool(threads);
    std::unique_ptr<CommStageLink> link;
    if (grid.pp_size > 1)
      link = std::make_unique<CommStageLink>(me.pp_stage, grid.pp_size, pg.to_prev_stage.get(), pg.to_next_stage.get());
    std::unique_ptr<ModelRunner> runner =
        load_cpu_rank(opts, manifest, layout, env.rank, *pg.comm, pool, link.get(), max_batch, max_seq_len,
                      env.rank == 0 && !opts.quiet && log_enabled(LogLevel::Info));
    RankContext ctx;
    ctx.tp_rank = me.tp_rank;
    ctx.tp_size = grid.tp_size;
    ctx.pp_stage = me.pp_stage;
    ctx.pp_size = grid.pp_size;
    ctx.dp_rank = me.dp_rank;
    ctx.dp_size = grid.dp_size;
    ctx.replicas = pg.replicas.get();
    ctx.replica_ranks = pg.replica_ranks.get();
    ctx.device = Device::Cpu;
    ctx.manifest = &manifest;
    ctx.model_dir = opts.model_dir;
    ctx.runner = runner.get();
    ctx.comm = pg.comm.get();
    ctx.tokenizer = tokenizer.get();
    fn(ctx);
  } catch (const std::exception& e) {
    if (pg.world) {
      // A collective that failed because a peer died: the monitor is about to stop this process with
      // "rank R stopping: ..." naming that peer; give it the moment, so the culprit is the one named.
      bool transport = false;
      for (const GlooComm* c : {pg.comm.get(), pg.to_prev_stage.get(), pg.to_next_stage.get()})
        transport = transport || (c && c->transport_failed());
      if (transport) std::this_thread::sleep_for(std::chrono::seconds(2));
      pg.world->report_failure(e.what());
    }
    throw;
  }
}

}  // namespace tpshard::cpu
