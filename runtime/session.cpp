// session.cpp: resolve_device and run_on_ranks: Device::Cpu goes to cpu::run_cpu_session
// (runtime/cpu/cpu_session.h: threads) or, in a process started as one rank, cpu::run_cpu_worker
// (runtime/cpu/cpu_worker.h), Device::Cuda to cuda::run_cuda_worker (runtime/cuda/cuda_session.h) in
// builds with the CUDA backend (TPSHARD_HAVE_CUDA).
#include "runtime/session.h"

#include "common/log.h"

#include <algorithm>
#include <cstdio>
#include <string>

#include "format/error.h"
#include "model/manifest.h"
#include "model/parallel_layout.h"
#include "runtime/tuning.h"
#include "runtime/cpu/cpu_session.h"
#include "runtime/cpu/cpu_worker.h"
#include "runtime/launcher.h"
#if TPSHARD_HAVE_CUDA
#include "runtime/cuda/cuda_session.h"
#endif

namespace tpshard {

std::string backends_built_in() {
#if TPSHARD_HAVE_CUDA
  return "backends: cpu (fp32), cuda (" + cuda::cuda_build_info() + ")";
#else
  return "backends: cpu (fp32); cuda not built in (configure with -DTPSHARD_CUDA=ON where the CUDA toolkit is)";
#endif
}

Device resolve_device(Device d) {
#if TPSHARD_HAVE_CUDA
  // --device cuda with no usable GPU at all: say so here, before the launcher starts one worker per rank
  // (each would fail with "needs GPU N ... 0 visible GPUs" and a --tp hint that cannot help).
  if (d == Device::Cuda)
    TPS_CHECK(cuda::cuda_device_count() > 0,
              "--device cuda: no usable GPU on this machine (the CUDA runtime sees none: no GPU, no driver, a "
              "driver older than this build's CUDA, or CUDA_VISIBLE_DEVICES hides them all)",
              "--device cpu (or auto, which picks the CPU when no GPU is usable); `nvidia-smi` shows the GPUs and "
              "the driver");
#endif
  if (d != Device::Auto) return d;
#if TPSHARD_HAVE_CUDA
  if (cuda::cuda_device_count() > 0) return Device::Cuda;
#endif
  return Device::Cpu;
}

void check_layout_runs(const SessionOptions& opts, Device device) {
  const Manifest manifest = load_manifest(opts.model_dir);
  const ParallelLayout layout = make_parallel_layout(manifest.model, opts.tp_size, opts.pp_size, opts.dp_size);
  shards_for(manifest, opts.tp_size, opts.model_dir, opts.pp_size);
#if TPSHARD_HAVE_CUDA
  if (device == Device::Cuda && !tuning().share_gpus) {
    const int nnodes = std::max(1, opts.nnodes);
    const int per_node = (layout.world_size() + nnodes - 1) / nnodes, gpus = cuda::cuda_device_count();
    TPS_CHECK(per_node <= gpus,
              "--tp " + std::to_string(opts.tp_size) + " x --pp " + std::to_string(opts.pp_size) + " x --dp " +
                  std::to_string(opts.dp_size) + " = " + std::to_string(layout.world_size()) + " ranks" +
                  (nnodes > 1 ? " over " + std::to_string(nnodes) + " nodes" : std::string()) + " need " +
                  std::to_string(per_node) + " GPUs per node, but this node has " + std::to_string(gpus),
              "use fewer ranks (one process per GPU: tp x pp x dp <= GPUs x nodes), or more nodes (--nnodes)");
  }
#else
  (void)device;
#endif
}

void run_on_ranks(const SessionOptions& opts, const std::function<void(RankContext&)>& fn) {
  TPS_CHECK(opts.tp_size >= 1, "--tp " + std::to_string(opts.tp_size) + " is not positive", "pass --tp 1 or more");
  const Device device = resolve_device(opts.device);
  TPS_CHECK(opts.pp_size >= 1 && opts.dp_size >= 1,
            "--pp " + std::to_string(opts.pp_size) + " / --dp " + std::to_string(opts.dp_size) + " is not positive",
            "pass --pp and --dp of 1 or more");
  if (!opts.quiet)
    log_line(LogLevel::Verbose,
             "tprun: session: model %s, device %s, tp_size %d, pp_size %d, dp_size %d, max_batch %s, max_seq_len %s, "
             "micro_batches %d, hashes %s\n",
             opts.model_dir.c_str(), device_name(device), opts.tp_size, opts.pp_size, opts.dp_size,
             opts.max_batch > 0 ? std::to_string(opts.max_batch).c_str() : "auto",
             opts.max_seq_len > 0 ? std::to_string(opts.max_seq_len).c_str() : "auto", opts.micro_batches,
             opts.verify_hashes ? "verified" : "not verified");
  if (device == Device::Cuda) {
#if TPSHARD_HAVE_CUDA
    SessionOptions o = opts;
    o.device = Device::Cuda;
    const bool quiet = opts.quiet;
    cuda::run_cuda_worker(o, [&](RankContext& ctx) {
      if (!quiet && ctx.is_output_rank()) {
        std::string grid = "tp_size " + std::to_string(ctx.tp_size);
        if (ctx.pp_size > 1) grid += ", pp_size " + std::to_string(ctx.pp_size);
        if (ctx.dp_size > 1) grid += ", dp_size " + std::to_string(ctx.dp_size);
        log_line(LogLevel::Info, "tprun: backend cuda, %s\n", grid.c_str());
      }
      fn(ctx);
    });
    return;
#else
    throw Error("--device cuda: this tprun was built without the CUDA backend",
                "use --device cpu, or rebuild with -DTPSHARD_CUDA=ON on a machine with the CUDA toolkit");
#endif
  }
  // One process per rank when a launcher started this process as a rank (tprun --cpu-processes /
  // --nnodes, mpirun, srun, torchrun); else every rank is a thread of this process.
  if (is_rank_process(opts)) {
    cpu::run_cpu_worker(opts, fn);
    return;
  }
  cpu::run_cpu_session(opts, fn);
}

}  // namespace tpshard
