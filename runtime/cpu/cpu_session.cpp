// cpu_session.cpp: run_cpu_session (cpu_session.h): manifest, one thread per rank, shard opening and
// checks, ThreadComm + ThreadPool + CPU runner, first error rethrown.
#include "runtime/cpu/cpu_session.h"

#include <chrono>

#include "common/log.h"
#include "common/progress.h"

#include <cstdio>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "format/error.h"
#include "format/shard_file.h"
#include "model/kv_ring.h"
#include "model/parallel_layout.h"
#include "model/rank_shard.h"
#include "runtime/cpu/cpu_rank.h"
#include "runtime/cpu/cpu_runner.h"
#include "runtime/cpu/cpu_weights.h"
#include "runtime/cpu/thread_comm.h"
#include "runtime/cpu/thread_mailbox.h"
#include "runtime/cpu/thread_pool.h"
#include "runtime/host_exchange.h"
#include "runtime/process_memory.h"

namespace tpshard::cpu {

void run_cpu_session(const SessionOptions& opts, const std::function<void(RankContext&)>& fn) {
  TPS_CHECK(opts.nnodes == 1, "--nnodes " + std::to_string(opts.nnodes) + ": the CPU backend runs on one node",
            "drop --nnodes/--node-rank/--master-addr, or use --device cuda");
  const Manifest manifest = load_manifest(opts.model_dir);
  const ModelConfig& config = manifest.model;
  // A layout the model cannot take, or one that was not converted, is named before any thread starts.
  // One thread per world rank; the ranks of one (replica, stage) share a ThreadGroup.
  const ParallelLayout layout = make_parallel_layout(config, opts.tp_size, opts.pp_size, opts.dp_size);
  shards_for(manifest, opts.tp_size, opts.model_dir, opts.pp_size);
  const int max_seq_len = effective_max_seq_len(opts, config);
  const int max_batch = opts.max_batch > 0 ? opts.max_batch : kDefaultCpuMaxBatch;
  {  // memory preflight: every rank of the job lives in this process
    uint64_t weights = 0, kv = 0;
    const size_t widen = 4 / dtype_size(manifest.dtype);  // weights are widened to f32 when loaded
    for (const ManifestShard& s : shards_for(manifest, opts.tp_size, opts.model_dir, opts.pp_size))
      weights += s.weight_bytes * widen * static_cast<uint64_t>(opts.dp_size);
    for (int r = 0; r < layout.world_size(); ++r) {
      const RankCoord c = layout.coord(r);
      const Range layers = layout.stage_layers[static_cast<size_t>(c.pp_stage)];
      kv += 2ull * sizeof(float) * static_cast<uint64_t>(max_batch) *
            static_cast<uint64_t>(kv_cache_layer_positions(config, layers.begin, layers.end, max_seq_len)) *
            static_cast<uint64_t>(layout.tp(c.tp_rank).kv_heads.size()) * static_cast<uint64_t>(config.head_dim);
    }
    const std::string warning = check_cpu_memory(weights, kv, available_host_memory_bytes(), opts.model_dir);
    if (!warning.empty() && !opts.quiet) std::fprintf(stderr, "%s\n", warning.c_str());
  }
  const std::unique_ptr<Tokenizer> tokenizer = load_model_tokenizer(opts.model_dir, config);
  const int world = layout.world_size();
  const int threads = opts.cpu_threads > 0 ? opts.cpu_threads : ThreadPool::default_threads_per_rank(world);
  if (!opts.quiet) {
    std::string grid = "tp_size " + std::to_string(opts.tp_size);
    if (opts.pp_size > 1) grid += ", pp_size " + std::to_string(opts.pp_size);
    if (opts.dp_size > 1) grid += ", dp_size " + std::to_string(opts.dp_size);
    log_line(LogLevel::Info, "tprun: backend cpu (fp32), %s, %d thread%s per rank\n", grid.c_str(), threads,
             threads == 1 ? "" : "s");
  }

  std::vector<std::shared_ptr<ThreadGroup>> groups;  // [dp * pp], one per tp group
  for (int g = 0; g < layout.dp_size * layout.pp_size; ++g) groups.push_back(std::make_shared<ThreadGroup>(layout.tp_size));
  auto mailbox = std::make_shared<ThreadMailbox>();
  // The replicas' output ranks meet once per batch round; a round may take long (a failure aborts it).
  auto replicas = std::make_shared<ThreadExchangeGroup>(layout.dp_size, kReplicaRoundTimeoutS);
  std::vector<std::shared_ptr<ThreadExchangeGroup>> replica_ranks;  // [dp], every rank of a replica
  for (int d = 0; d < layout.dp_size; ++d)
    replica_ranks.push_back(std::make_shared<ThreadExchangeGroup>(layout.tp_size * layout.pp_size));
  std::mutex error_mutex;
  std::exception_ptr first_error;
  bool failed = false;
  auto abort_all = [&](const std::string& why) {
    for (auto& g : groups) g->abort(why);
    mailbox->abort(why);
    replicas->abort(why);
    for (auto& r : replica_ranks) r->abort(why);
  };
  auto rank_main = [&](int world_rank) {
    const RankCoord c = layout.coord(world_rank);
    const std::shared_ptr<ThreadGroup>& group = groups[static_cast<size_t>(c.dp_rank * layout.pp_size + c.pp_stage)];
    const std::string who = rank_name(layout, world_rank);
    try {
      ThreadComm comm(group, c.tp_rank);
      ThreadPool pool(threads);
      ThreadStageLink link(mailbox, layout, world_rank);
      ThreadExchange replica_exchange(replicas, c.dp_rank);
      ThreadExchange replica_ranks_exchange(replica_ranks[static_cast<size_t>(c.dp_rank)],
                                            c.pp_stage * layout.tp_size + c.tp_rank);
      std::unique_ptr<ModelRunner> runner =
          load_cpu_rank(opts, manifest, layout, world_rank, comm, pool, &link, max_batch, max_seq_len,
                        world_rank == 0 && !opts.quiet && log_enabled(LogLevel::Info));
      RankContext ctx;
      ctx.tp_rank = c.tp_rank;
      ctx.tp_size = layout.tp_size;
      ctx.pp_stage = c.pp_stage;
      ctx.pp_size = layout.pp_size;
      ctx.dp_rank = c.dp_rank;
      ctx.dp_size = layout.dp_size;
      const bool replica_output = c.tp_rank == 0 && c.pp_stage == 0;
      ctx.replicas = layout.dp_size > 1 && replica_output ? &replica_exchange : nullptr;
      ctx.replica_ranks = &replica_ranks_exchange;
      ctx.device = Device::Cpu;
      ctx.manifest = &manifest;
      ctx.model_dir = opts.model_dir;
      ctx.runner = runner.get();
      ctx.comm = &comm;
      ctx.tokenizer = tokenizer.get();
      fn(ctx);
    } catch (const std::exception& e) {
      std::lock_guard<std::mutex> lock(error_mutex);
      // Errors raised because another rank aborted the job are consequences, not causes.
      if (!failed) {
        failed = true;
        first_error = std::current_exception();
      }
      abort_all(who + " failed: " + e.what());
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mutex);
      if (!failed) {
        failed = true;
        first_error = std::current_exception();
      }
      abort_all(who + " failed");
    }
  };
  std::vector<std::thread> ranks;
  for (int r = 1; r < world; ++r) ranks.emplace_back(rank_main, r);
  rank_main(0);
  for (auto& t : ranks) t.join();
  if (first_error) std::rethrow_exception(first_error);
}

}  // namespace tpshard::cpu
