// session.cpp: resolve_device and run_on_ranks: Device::Cpu goes to cpu::run_cpu_session
// (runtime/cpu/cpu_session.h), Device::Cuda to cuda::run_cuda_worker (runtime/cuda/cuda_session.h) in
// builds with the CUDA backend (TPSHARD_HAVE_CUDA).
#include "runtime/session.h"

#include <cstdio>
#include <string>

#include "format/error.h"
#include "runtime/cpu/cpu_session.h"
#if TPSHARD_HAVE_CUDA
#include "runtime/cuda/cuda_session.h"
#endif

namespace tpshard {

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

void run_on_ranks(const SessionOptions& opts, const std::function<void(RankContext&)>& fn) {
  TPS_CHECK(opts.tp_size >= 1, "--tp " + std::to_string(opts.tp_size) + " is not positive", "pass --tp 1 or more");
  const Device device = resolve_device(opts.device);
  TPS_CHECK(opts.pp_size >= 1 && opts.dp_size >= 1,
            "--pp " + std::to_string(opts.pp_size) + " / --dp " + std::to_string(opts.dp_size) + " is not positive",
            "pass --pp and --dp of 1 or more");
  if (device == Device::Cuda) {
#if TPSHARD_HAVE_CUDA
    TPS_CHECK(opts.pp_size == 1 && opts.dp_size == 1,
              "--pp " + std::to_string(opts.pp_size) + " --dp " + std::to_string(opts.dp_size) +
                  ": pipeline stages and data-parallel replicas run on the CPU backend only; the CUDA backend runs "
                  "one tensor-parallel group per job",
              "use --device cpu, or run one tprun per replica (--tp only) on separate GPUs (CUDA_VISIBLE_DEVICES)");
    SessionOptions o = opts;
    o.device = Device::Cuda;
    const bool quiet = opts.quiet;
    cuda::run_cuda_worker(o, [&](RankContext& ctx) {
      if (!quiet && ctx.tp_rank == 0) std::fprintf(stderr, "tprun: backend cuda, tp_size %d\n", ctx.tp_size);
      fn(ctx);
    });
    return;
#else
    throw Error("--device cuda: this tprun was built without the CUDA backend",
                "use --device cpu, or rebuild with -DTPSHARD_CUDA=ON on a machine with the CUDA toolkit");
#endif
  }
  cpu::run_cpu_session(opts, fn);
}

}  // namespace tpshard
