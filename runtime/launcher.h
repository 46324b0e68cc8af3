// launcher.h: tprun as a launcher: one worker process per rank on this node (like torchrun), with
// failure propagation. POSIX only; compiled in every build.
#pragma once
#include <string>

#include "runtime/session_types.h"

namespace tpshard {

/// Exit code of a worker that stopped because ANOTHER rank failed (the launcher then reports that rank).
constexpr int kExitPeerFailed = 3;

/// Who this worker is, read from the environment of whichever launcher started it. Precedence: tprun's
/// TPRUN_RANK / TPRUN_LOCAL_RANK / TPRUN_WORLD_SIZE / TPRUN_LOCAL_WORLD_SIZE / TPRUN_MASTER; torchrun's
/// RANK / LOCAL_RANK / WORLD_SIZE / LOCAL_WORLD_SIZE / MASTER_ADDR + MASTER_PORT; Open MPI's
/// OMPI_COMM_WORLD_{RANK,LOCAL_RANK,SIZE,LOCAL_SIZE}; srun's SLURM_PROCID / SLURM_LOCALID /
/// SLURM_STEP_NUM_TASKS / SLURM_STEP_TASKS_PER_NODE at SLURM_NODEID; MPICH/Hydra's PMI_RANK / PMI_SIZE /
/// MPI_LOCALRANKID. The master address: TPRUN_MASTER, else MASTER_ADDR:MASTER_PORT (MASTER_PORT + 1 under
/// torchrun, whose own store listens on MASTER_PORT), else srun: the first host of SLURM_STEP_NODELIST
/// (SLURM_JOB_NODELIST) and the first port of SLURM_STEP_RESV_PORTS, else 15000 + 10 x (job id mod 1000) +
/// step id mod 10; mpirun: mpirun's host (OMPI_MCA_orte_hnp_uri) and port
/// 20000 + jobid mod 10000 (runtime/cluster_env.h); 127.0.0.1 with that port when all ranks are on this
/// node; else 127.0.0.1:29517 on one node (empty when unknown: multi-node needs one).
struct WorkerEnv {
  bool found = false;            ///< some launcher's variables are set (with world size > 1, or TPRUN_*)
  std::string source;            ///< "tprun", "torchrun", "mpirun", "srun", "pmi"; empty when not found
  int rank = 0;
  int local_rank = 0;            ///< index of this process's GPU on its node
  int world_size = 1;
  int local_world_size = 1;
  std::string master_addr;       ///< HOST:PORT of rank 0's rendezvous
  /// CUDA_VISIBLE_DEVICES lists exactly one device: the launcher gave this process its own GPU (srun
  /// --gpus-per-task=1, a per-rank CUDA_VISIBLE_DEVICES), which is device 0 whatever its local rank.
  bool own_visible_gpu = false;
};
WorkerEnv read_worker_env();

/// True when this process was started as a worker (by tprun itself, torchrun, mpirun or srun).
bool is_worker_process();

/// One tprun per node under srun / mpirun / torchrun (`srun --ntasks-per-node=1 tprun ... --nnodes M`):
/// the launcher started opts.nnodes processes (env.world_size == opts.nnodes > 1) but the layout has
/// another number of ranks. Such a process launches its node's ranks as node env.rank, not as a rank.
bool is_node_launcher(const WorkerEnv& env, const SessionOptions& opts);

/// True when this process runs one rank of the job itself: a launcher's worker that is not a node
/// launcher (is_node_launcher).
bool is_rank_process(const SessionOptions& opts);

/// If opts.device is CUDA, or CPU with opts.cpu_processes or nnodes > 1, and this process is not a rank
/// process (is_rank_process: not a worker, or a node launcher under srun / mpirun / torchrun, which then
/// is node env.rank with the launcher's master address): start the workers of this node
/// (re-executing argv with TPRUN_RANK / TPRUN_LOCAL_RANK / TPRUN_WORLD_SIZE / TPRUN_MASTER set), forward
/// Ctrl-C / SIGTERM to every worker (SIGKILL after opts.interrupt_grace_s), stop all when one fails (SIGKILL
/// 5 s later), and return the exit code to use (0 on success, also after a signal when every worker exited
/// 0, as serve does after its drain; 128 + signal when a signal stopped them; non-zero naming the
/// failing rank on stderr). Returns -1 when this process should run the command itself.
/// Multi-node: opts carry nnodes / node_rank / master_addr (see SessionOptions).
/// opts.device must already be resolved (resolve_device, runtime/session.h): Auto starts no workers.
int launch_workers_if_needed(int argc, char** argv, const SessionOptions& opts);

}  // namespace tpshard
