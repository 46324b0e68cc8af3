// cpu_session.cpp: run_cpu_session (cpu_session.h): manifest, one thread per rank, shard opening and
// checks, ThreadComm + ThreadPool + CPU runner, first error rethrown.
#include "runtime/cpu/cpu_session.h"

#include <cstdio>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "format/error.h"
#include "format/shard_file.h"
#include "model/parallel_layout.h"
#include "model/rank_shard.h"
#include "runtime/cpu/cpu_runner.h"
#include "runtime/cpu/cpu_weights.h"
#include "runtime/cpu/thread_comm.h"
#include "runtime/cpu/thread_pool.h"

namespace tpshard::cpu {

void run_cpu_session(const SessionOptions& opts, const std::function<void(RankContext&)>& fn) {
  TPS_CHECK(opts.nnodes == 1, "--nnodes " + std::to_string(opts.nnodes) + ": the CPU backend runs on one node",
            "drop --nnodes/--node-rank/--master-addr, or use --device cuda");
  const Manifest manifest = load_manifest(opts.model_dir);
  shards_for(manifest, opts.tp_size, opts.model_dir);  // names the converted tp sizes before any thread starts
  const ModelConfig& config = manifest.model;
  // A tp_size the model cannot take is named before loading. One thread per world rank; the ranks of
  // one tp group share one ThreadGroup (today the job is one group).
  const ParallelLayout layout = make_parallel_layout(config, opts.tp_size);
  const int max_seq_len = effective_max_seq_len(opts, config);
  const std::unique_ptr<Tokenizer> tokenizer = load_model_tokenizer(opts.model_dir, config);
  const int threads = opts.cpu_threads > 0 ? opts.cpu_threads : ThreadPool::default_threads_per_rank(opts.tp_size);
  if (!opts.quiet)
    std::fprintf(stderr, "tprun: backend cpu (fp32), tp_size %d, %d thread%s per rank\n", opts.tp_size, threads,
                 threads == 1 ? "" : "s");

  auto group = std::make_shared<ThreadGroup>(layout.tp_size);
  std::mutex error_mutex;
  std::exception_ptr first_error;
  auto rank_main = [&](int world_rank) {
    const int rank = layout.coord(world_rank).tp_rank;
    try {
      const std::unique_ptr<ShardReader> reader = open_rank_shard(manifest, opts.model_dir, layout.tp_size, rank);
      ThreadComm comm(group, rank);
      ThreadPool pool(threads);
      cpu::ModelWeights weights = cpu::load_weights(*reader, config, opts.verify_hashes);
      cpu::CpuRunnerOptions ro;
      ro.max_batch = opts.max_batch;
      ro.max_seq_len = max_seq_len;
      std::unique_ptr<ModelRunner> runner = cpu::make_cpu_runner(config, std::move(weights), comm, pool, ro);
      RankContext ctx;
      ctx.tp_rank = rank;
      ctx.tp_size = layout.tp_size;
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
  for (int r = 1; r < layout.world_size(); ++r) ranks.emplace_back(rank_main, r);
  rank_main(0);
  for (auto& t : ranks) t.join();
  if (first_error) std::rethrow_exception(first_error);
}

}  // namespace tpshard::cpu
