// cpu_worker.h: the CPU backend with one process per rank. This process is one rank of a job started by
// tprun's launcher (--cpu-processes, --nnodes), mpirun, srun or torchrun (runtime/launcher.h); it meets
// the others on the job's TCP rendezvous (rendezvous.h, rank_groups.h), builds a GlooComm per group it
// belongs to (gloo_comm.h) and runs the function for its own rank. Same outputs as the threaded
// backend (cpu_session.h): the same runner, the same summation order.
#pragma once
#include <functional>

#include "runtime/session_types.h"

namespace tpshard::cpu {

/// Identity from read_worker_env (world size must equal tp x pp x dp, else Error naming the launcher);
/// threads per rank: opts.cpu_threads, else threads_per_rank(ranks of this host sharing this process's
/// affinity mask) (runtime/cpu_budget.h). A peer that fails or dies makes this process print
/// "error: rank R stopping: ..." and exit kExitPeerFailed (launcher.h); a failure here is reported to the
/// peers and rethrown.
void run_cpu_worker(const SessionOptions& opts, const std::function<void(RankContext&)>& fn);

}  // namespace tpshard::cpu
