// launcher.h: tprun as a launcher: one worker process per GPU on this node (like torchrun), with
// failure propagation. POSIX only; compiled in every build.
#pragma once
#include "runtime/session.h"

namespace tpshard {

/// True when this process was started as a worker (by tprun itself, torchrun, mpirun or srun).
bool is_worker_process();

/// If the resolved device is CUDA and this process is not a worker: start the workers of this node
/// (re-executing argv with TPRUN_RANK / TPRUN_LOCAL_RANK / TPRUN_WORLD_SIZE / TPRUN_MASTER set), forward
/// Ctrl-C, stop all when one fails, and return the exit code to use (0 on success; non-zero naming the
/// failing rank on stderr). Returns -1 when this process should run the command itself.
/// Multi-node: opts carry nnodes / node_rank / master_addr (see SessionOptions).
int launch_workers_if_needed(int argc, char** argv, const SessionOptions& opts);

}  // namespace tpshard
