// cuda_session.h: the CUDA backend's session; run_on_ranks (runtime/session.h) dispatches Device::Cuda
// here. Compiled only with CUDA.
#pragma once
#include <functional>
#include <string>

#include "runtime/session_types.h"

namespace tpshard::cuda {

/// Number of visible CUDA devices; 0 when there is no driver or no device (never throws).
int cuda_device_count();

/// "CUDA runtime 13.0, NCCL 2.27.3, built for sm_90": the versions this build was compiled with.
std::string cuda_build_info();

/// Run fn for this worker process's own rank: read rank / local rank / world size from the
/// environment (tprun launcher's TPRUN_*, torchrun's RANK/LOCAL_RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT,
/// mpirun's OMPI_COMM_WORLD_*, srun's SLURM_PROCID/SLURM_LOCALID/SLURM_NTASKS), cudaSetDevice(local_rank)
/// before any other CUDA/NCCL call, exchange the NCCL unique id over the rendezvous, load the shard into a
/// WeightArena, build the CUDA runner and call fn. Throws Error on any failure (naming the rank).
void run_cuda_worker(const SessionOptions& opts, const std::function<void(RankContext&)>& fn);

}  // namespace tpshard::cuda
