// session.cpp: run_on_ranks. CPU: load the manifest, start tp_size threads, each opening only its own
// shard, building a ThreadComm + ThreadPool + CPU runner, then calling fn. A failure on one rank aborts
// the thread group, so ranks blocked in a collective wake up instead of deadlocking; the first error is
// rethrown. CUDA (TPSHARD_HAVE_CUDA): delegated to tpshard::cuda::run_cuda_worker.
#include "runtime/session.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "model/parallel_layout.h"
#include "model/rank_shard.h"
#include "format/error.h"
#include "format/shard_file.h"
#include "runtime/cpu/cpu_runner.h"
#include "runtime/cpu/cpu_weights.h"
#include "runtime/cpu/thread_comm.h"
#include "runtime/cpu/thread_pool.h"
#if TPSHARD_HAVE_CUDA && TPSHARD_RUNTIME_CUDA_SESSION
#include "runtime/cuda/cuda_session.h"
#endif

namespace tpshard {

namespace {

void run_cpu(const SessionOptions& opts, const std::function<void(RankContext&)>& fn) {
  TPS_CHECK(opts.nnodes == 1, "--nnodes " + std::to_string(opts.nnodes) + ": the CPU backend runs on one node",
            "drop --nnodes/--node-rank/--master-addr, or use --device cuda");
  const Manifest manifest = load_manifest(opts.model_dir);
  shards_for(manifest, opts.tp_size, opts.model_dir);  // names the tp sizes converted before any thread starts
  const ModelConfig& config = manifest.model;
  make_parallel_layout(config, opts.tp_size);  // a tp_size the model cannot take: named before loading
  const int max_seq_len = effective_max_seq_len(opts, config);
  const std::unique_ptr<Tokenizer> tokenizer = load_model_tokenizer(opts.model_dir, config);
  const int threads = opts.cpu_threads > 0 ? opts.cpu_threads : ThreadPool::default_threads_per_rank(opts.tp_size);
  if (!opts.quiet)
    std::fprintf(stderr, "tprun: backend cpu (fp32), tp_size %d, %d thread%s per rank\n", opts.tp_size, threads,
                 threads == 1 ? "" : "s");

  auto group = std::make_shared<ThreadGroup>(opts.tp_size);
  std::mutex error_mutex;
  std::exception_ptr first_error;
  auto rank_main = [&](int rank) {
    try {
      const std::unique_ptr<ShardReader> reader = open_rank_shard(manifest, opts.model_dir, opts.tp_size, rank);
      ThreadComm comm(group, rank);
      ThreadPool pool(threads);
      cpu::ModelWeights weights = cpu::load_weights(*reader, config, opts.verify_hashes);
      cpu::CpuRunnerOptions ro;
      ro.max_batch = opts.max_batch;
      ro.max_seq_len = max_seq_len;
      std::unique_ptr<ModelRunner> runner = cpu::make_cpu_runner(config, std::move(weights), comm, pool, ro);
      RankContext ctx;
      ctx.tp_rank = rank;
      ctx.tp_size = opts.tp_size;
      ctx.device = Device::Cpu;
      ctx.manifest = &manifest;
      ctx.model_dir = opts.model_dir;
      ctx.runner = runner.get();
      ctx.comm = &comm;
      ctx.tokenizer = tokenizer.get();
      fn(ctx);
    } catch (const std::exception& e) {
      std::lock_guard<std::mutex> lock(error_mutex);
      // Errors raised because another rank aborted the group are consequences, not causes.
      if (!group->aborted() && !first_error) first_error = std::current_exception();
      group->abort("tp_rank " + std::to_string(rank) + " failed: " + e.what());
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mutex);
      if (!group->aborted() && !first_error) first_error = std::current_exception();
      group->abort("tp_rank " + std::to_string(rank) + " failed");
    }
  };
  std::vector<std::thread> ranks;
  for (int r = 1; r < opts.tp_size; ++r) ranks.emplace_back(rank_main, r);
  rank_main(0);
  for (auto& t : ranks) t.join();
  if (first_error) std::rethrow_exception(first_error);
}

}  // namespace

const char* device_name(Device d) {
  switch (d) {
    case Device::Auto: return "auto";
    case Device::Cpu: return "cpu";
    case Device::Cuda: return "cuda";
  }
  return "?";
}

Device resolve_device(Device d) {
#if TPSHARD_HAVE_CUDA && TPSHARD_RUNTIME_CUDA_SESSION
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
#if TPSHARD_HAVE_CUDA && TPSHARD_RUNTIME_CUDA_SESSION
  if (cuda::cuda_device_count() > 0) return Device::Cuda;
#endif
  return Device::Cpu;
}

std::unique_ptr<Tokenizer> load_model_tokenizer(const std::string& model_dir, const ModelConfig& config) {
  namespace fs = std::filesystem;
  const bool json = fs::exists(fs::path(model_dir) / "tokenizer.json");
  if (!json && !fs::exists(fs::path(model_dir) / "tokenizer.model")) return nullptr;
  std::unique_ptr<Tokenizer> t = Tokenizer::load(model_dir);
  const std::string file = (fs::path(model_dir) / (json ? "tokenizer.json" : "tokenizer.model")).string();
  TPS_CHECK(t->vocab_size() > 0, file + ": the tokenizer has no tokens",
            "restore the model's own tokenizer file (tpshard convert copies it from the checkpoint)");
  TPS_CHECK(t->vocab_size() <= config.vocab_size,
            file + ": the tokenizer has " + std::to_string(t->vocab_size()) + " tokens, more than the model's vocab_size " +
                std::to_string(config.vocab_size) + ": it belongs to another model",
            "copy the tokenizer files of the checkpoint this model was converted from (tpshard convert copies them)");
  return t;
}

int effective_max_seq_len(const SessionOptions& opts, const ModelConfig& config) {
  const int64_t model_max = config.max_position_embeddings;
  const int64_t window = config.sliding_window;  // 0: full attention
  if (opts.max_seq_len <= 0) {
    int64_t seq = model_max > 0 ? std::min<int64_t>(model_max, 2048) : 2048;
    if (window > 0) seq = std::min(seq, window);
    return static_cast<int>(seq);
  }
  TPS_CHECK(model_max <= 0 || opts.max_seq_len <= model_max,
            "--max-seq-len " + std::to_string(opts.max_seq_len) + " exceeds the model's max_position_embeddings " +
                std::to_string(model_max),
            "pass --max-seq-len " + std::to_string(model_max) + " or less");
  TPS_CHECK(window <= 0 || opts.max_seq_len <= window,
            "--max-seq-len " + std::to_string(opts.max_seq_len) + " exceeds the model's sliding_window " +
                std::to_string(window) + ": tprun does not implement sliding-window attention, so longer sequences "
                "would attend to keys the model ignores",
            "pass --max-seq-len " + std::to_string(window) + " or less (up to the window the results are exact)");
  return opts.max_seq_len;
}

void run_on_ranks(const SessionOptions& opts, const std::function<void(RankContext&)>& fn) {
  TPS_CHECK(opts.tp_size >= 1, "--tp " + std::to_string(opts.tp_size) + " is not positive", "pass --tp 1 or more");
  const Device device = resolve_device(opts.device);
  if (device == Device::Cuda) {
#if TPSHARD_HAVE_CUDA && TPSHARD_RUNTIME_CUDA_SESSION
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
  run_cpu(opts, fn);
}

}  // namespace tpshard
