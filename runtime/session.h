// session.h: open a converted model on the chosen backend and run a function on every tp rank. The
// dispatcher above both backends (target tpshard_session); the types it shares with them are in
// runtime/session_types.h.
// CPU backend (runtime/cpu/cpu_session.h): tp_size threads of this process, each with its own shard and a
// thread communicator.
// CUDA backend (runtime/cuda/cuda_session.h): this process is one worker (started by the tprun launcher,
// mpirun, srun or torchrun); it runs the function for its own rank only.
#pragma once
#include <functional>
#include <string>

#include "runtime/session_types.h"

namespace tpshard {

/// The backends of this build, one line: "backends: cpu (fp32), cuda (CUDA runtime 13.0, NCCL 2.27.3,
/// sm_90)" or "backends: cpu (fp32); cuda not built in". Creates no CUDA context.
std::string backends_built_in();

/// Auto -> Cuda when this build has CUDA and a device is visible, else Cpu; other values unchanged.
/// Cuda in a CUDA build that sees no usable GPU: Error (hint: --device cpu or auto).
Device resolve_device(Device d);

/// Before any process starts or weight loads: Error naming the numbers and the fix when the layout
/// (opts.tp_size, pp_size, dp_size) cannot run: the model cannot take it (more stages than layers, a tp
/// the heads cannot split), it was not converted, or (device Cuda) this node has fewer GPUs than its
/// ranks (world_size / nnodes; several ranks per GPU only under TPSHARD_TEST_SHARE_GPUS). `device` must
/// be resolved.
void check_layout_runs(const SessionOptions& opts, Device device);

/// Load the model on every rank of this process and call fn(ctx) on each (concurrently for CPU
/// threads). An exception on any rank stops all ranks and is rethrown here (the first one).
void run_on_ranks(const SessionOptions& opts, const std::function<void(RankContext&)>& fn);

}  // namespace tpshard
