// cuda_session.cpp: run_cuda_worker and cuda_device_count (cuda_session.h), CudaWorker and the memory
// plan (worker.h). Control flow of one worker: identity -> cudaSetDevice -> rendezvous -> communicator
// (local / peer / NCCL, make_device_comm.h) -> memory plan -> WeightArena -> make_cuda_runner -> fn(ctx).
#include "runtime/cuda/cuda_session.h"

#include <fcntl.h>
#include <nccl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>

#include "model/rank_shard.h"
#include "model/memory_plan.h"
#include "format/shard_file.h"
#include "runtime/cuda/check.h"
#include "runtime/cuda/cuda_runner.h"
#include "runtime/cuda/device_stage_link.h"
#include "runtime/cuda/make_device_comm.h"
#include "runtime/cuda/weight_arena.h"
#include "runtime/cuda/worker.h"
#include "runtime/tuning.h"
#include "tokenizer/tokenizer.h"

namespace tpshard::cuda {
namespace {

std::string mib(uint64_t b) { return std::to_string((b + (1u << 19)) >> 20) + " MiB"; }

}  // namespace

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

std::string cuda_build_info() {
  const int nccl = NCCL_VERSION_CODE;  // major * 10000 + minor * 100 + patch (NCCL >= 2.9)
  return "CUDA runtime " + std::to_string(CUDART_VERSION / 1000) + "." + std::to_string(CUDART_VERSION % 1000 / 10) +
         ", NCCL " + std::to_string(nccl / 10000) + "." + std::to_string(nccl / 100 % 100) + "." +
         std::to_string(nccl % 100) + ", built for sm_" TPSHARD_CUDA_ARCHS;
}

double worker_timeout_s() { return tuning().nccl_timeout_s; }

CudaWorker::CudaWorker(const SessionOptions& opts) {
  env_ = read_worker_env();
  if (!env_.found) {  // started directly (tp 1 on one GPU): rank 0 of 1
    env_.world_size = 1;
    env_.local_world_size = 1;
  }
  check_tp_rank() = env_.rank;
  device_ = env_.local_rank;
  grid_.dp_size = opts.dp_size;
  grid_.pp_size = opts.pp_size;
  grid_.tp_size = opts.tp_size;
  const std::string layout = "--tp " + std::to_string(opts.tp_size) +
                             (opts.pp_size > 1 ? " --pp " + std::to_string(opts.pp_size) : std::string()) +
                             (opts.dp_size > 1 ? " --dp " + std::to_string(opts.dp_size) : std::string());
  TPS_CHECK(env_.world_size == grid_.world_size(),
            "rank " + std::to_string(env_.rank) + ": the launcher (" + (env_.source.empty() ? "none" : env_.source) +
                ") started " + std::to_string(env_.world_size) + " processes but " + layout + " needs " +
                std::to_string(grid_.world_size()),
            "start exactly one process per rank (e.g. mpirun -np " + std::to_string(grid_.world_size()) +
                "), or let tprun start them: tprun MODEL " + layout + " ...");
  coord_ = grid_.coord(env_.rank);
  if (env_.rank != 0) {  // only rank 0 writes to stdout
    fflush(stdout);
    int devnull = open("/dev/null", O_WRONLY);
    if (devnull >= 0) {
      dup2(devnull, 1);
      close(devnull);
    }
  }
  setenv("NCCL_NVLS_ENABLE", "0", 0);  // before any NCCL call

  // cudaSetDevice(local_rank) is the first CUDA call of a worker: it never touches another device.
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e == cudaSuccess && count > 0 && tuning().share_gpus) device_ = env_.local_rank % count;  // tests only
  // One GPU per process (srun --gpus-per-task=1): its only visible device, whatever the local rank.
  if (e == cudaSuccess && count == 1 && env_.own_visible_gpu) device_ = 0;
  if (e != cudaSuccess || device_ >= count) {
    (void)cudaGetLastError();
    throw Error("rank " + std::to_string(env_.rank) + ": needs GPU " + std::to_string(env_.local_rank) +
                    " (local rank) but this node has " + std::to_string(e == cudaSuccess ? count : 0) + " visible GPUs" +
                    (e != cudaSuccess ? std::string(" (") + cudaGetErrorString(e) + ")" : std::string()),
                "use --tp x --pp x --dp <= GPUs per node x nodes, and check CUDA_VISIBLE_DEVICES");
  }
  TPS_CUDA_CHECK(cudaSetDevice(device_));
  TPS_CUDA_CHECK(cudaFree(nullptr));  // create the context now so its memory is measured on its own
  TPS_CUDA_CHECK(cudaMemGetInfo(&marks_.free_after_context, &marks_.total));

  const double timeout = worker_timeout_s();
  DeviceCommOptions co;
  co.timeout_s = timeout;
  co.force_nccl = tuning().force_nccl;
  co.custom_all_reduce = tuning().custom_all_reduce;
  if (env_.world_size > 1) {
    std::string master = opts.master_addr.empty() ? env_.master_addr : opts.master_addr;
    if (env_.source == "tprun") master = env_.master_addr;  // the launcher resolved it
    TPS_CHECK(!master.empty(),
              "rank " + std::to_string(env_.rank) + ": no rendezvous address for a multi-node " + env_.source + " job",
              "export TPRUN_MASTER=HOST:PORT (rank 0's host) or MASTER_ADDR/MASTER_PORT, or pass --master-addr");
    rendezvous_ = std::make_unique<Rendezvous>(master, env_.rank, env_.world_size, timeout);
    // The world rendezvous' only exchange: where each rank listens when it leads a group. Then it watches
    // the peers: when another rank fails this one prints its message and exits.
    const std::vector<RankGroup> groups = job_groups(grid_);
    const std::vector<std::string> addresses = exchange_group_addresses(*rendezvous_, groups);
    const int me = env_.rank;
    rendezvous_->start_monitor([me](const std::string& why) {
      std::string msg = "error: rank " + std::to_string(me) + " stopping: " + why + "\n";
      if (write(2, msg.data(), msg.size()) < 0) {}
      _exit(kExitPeerFailed);  // the driver frees the context; spinning kernels die with the process
    });
    // Every group this rank belongs to, in the one order of job_groups (rank_groups.h: no deadlock).
    for (size_t i = 0; i < groups.size(); ++i) {
      const RankGroup& g = groups[i];
      const int index = g.index_of(env_.rank);
      if (index < 0) continue;
      const double group_timeout = g.kind == GroupKind::Replicas ? kReplicaRoundTimeoutS : timeout;
      group_rendezvous_.push_back(meet_group(g, addresses[i], env_.rank, group_timeout));
      Rendezvous& meeting = *group_rendezvous_.back();
      if (g.kind == GroupKind::Replicas) {
        replica_exchange_ = std::make_unique<RendezvousExchange>(meeting);
        continue;
      }
      if (g.kind == GroupKind::ReplicaRanks) {
        replica_ranks_ = std::make_unique<RendezvousExchange>(meeting);
        continue;
      }
      RendezvousExchange exchange(meeting);
      std::unique_ptr<DeviceCommunicator> comm =
          make_device_comm(exchange, co, g.kind == GroupKind::TensorParallel ? &comm_choice_ : nullptr);
      if (g.kind == GroupKind::TensorParallel) {
        comm_ = std::move(comm);
      } else if (index == 0) {
        to_next_stage_ = std::move(comm);
      } else {
        to_prev_stage_ = std::move(comm);
      }
    }
  }
  if (!replica_ranks_) replica_ranks_ = std::make_unique<SingleExchange>();  // one rank per replica
  if (!comm_) {  // tp 1: the local communicator (no peers)
    SingleExchange single;
    comm_ = make_device_comm(single, co, &comm_choice_);
  }
  comm_->barrier();  // the first collective sets up NCCL's connections and buffers: count them as the comm's
  for (DeviceCommunicator* c : {to_prev_stage_.get(), to_next_stage_.get()})
    if (c) c->barrier();
  TPS_CUDA_CHECK(cudaMemGetInfo(&marks_.free_after_comm, &marks_.total));
}

CudaWorker::~CudaWorker() {
  to_prev_stage_.reset();
  to_next_stage_.reset();
  comm_.reset();
  replica_exchange_.reset();
  replica_ranks_.reset();
  group_rendezvous_.clear();
  rendezvous_.reset();
}

void CudaWorker::report_failure(const std::string& message) {
  if (rendezvous_) rendezvous_->report_failure(message);
  for (DeviceCommunicator* c : {to_prev_stage_.get(), to_next_stage_.get()})
    if (c) c->abort();
  if (comm_) comm_->abort();  // the peers are stopping: never wait for them (NCCL finalize, peer barrier)
}

void check_memory_plan(const Manifest& m, const std::string& model_dir, int tp_size, int max_batch, int max_seq_len,
                       size_t free_bytes, size_t total_bytes, int pp_size, int pp_stage) {
  // This rank's stage only (its layers' kv_cache, its weights); the largest rank of that stage.
  auto stage_total = [&](const ::tpshard::MemoryPlan& p) {
    uint64_t t = 0;
    for (const RankMemory& r : p.ranks)
      if (r.pp_stage == pp_stage) t = std::max(t, r.total_bytes);
    return t;
  };
  auto total_of = [&](int tp, int batch, int seq) {
    return stage_total(::tpshard::plan_memory(m, tp, batch, seq, model_dir, 0, pp_size));
  };
  const ::tpshard::MemoryPlan p = ::tpshard::plan_memory(m, tp_size, max_batch, max_seq_len, model_dir, 0, pp_size);
  if (stage_total(p) <= free_bytes) return;
  std::string fits;
  for (int b = max_batch - 1; b >= 1; --b)
    if (total_of(tp_size, b, max_seq_len) <= free_bytes) {
      fits += " --max-batch " + std::to_string(b) + " (with --max-seq-len " + std::to_string(max_seq_len) + ");";
      break;
    }
  for (int s = max_seq_len / 2; s >= 64; s /= 2)
    if (total_of(tp_size, max_batch, s) <= free_bytes) {
      fits += " --max-seq-len " + std::to_string(s) + " (with --max-batch " + std::to_string(max_batch) + ");";
      break;
    }
  for (const auto& kv : m.shards) {  // pp 1 layouts
    if (pp_size > 1 || kv.first <= tp_size) continue;
    if (total_of(kv.first, max_batch, max_seq_len) <= free_bytes) {
      fits += " --tp " + std::to_string(kv.first) + " (already converted in this model dir);";
      break;
    }
  }
  if (fits.empty()) fits = " none found; convert with a larger --tp (tpshard convert --tp) and use more GPUs";
  throw Error("tp_rank " + std::to_string(check_tp_rank()) + ": the memory plan needs " + mib(p.total_bytes()) +
                  " (weights " + mib(p.weight_bytes) + " + kv_cache " + mib(p.kv_cache_bytes) + " + activations " +
                  mib(p.activation_bytes) + " + workspace " + mib(p.workspace_bytes) + ") but only " + mib(free_bytes) +
                  " of " + mib(total_bytes) + " are free on this GPU (tpshard plan prints the same numbers)",
              "settings that would fit:" + fits);
}

namespace {

/// One stderr line per rank at the end of a job: what this process holds on its GPU, by category
/// (device bytes; "other" = activations, cuBLASLt workspace, graphs and allocator slack, measured as
/// the memory in use minus the rest). Several ranks on one GPU (TPSHARD_TEST_SHARE_GPUS) see each
/// other's allocations in "other".
void print_rank_memory(CudaWorker& worker, const ModelRunner& runner) {
  size_t free_b = 0, total_b = 0;
  if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) {
    (void)cudaGetLastError();
    return;
  }
  const DeviceMemoryMarks& m = worker.marks();
  const uint64_t used_after_comm = m.free_after_comm > free_b ? m.free_after_comm - free_b : 0;
  const uint64_t held = runner.weight_bytes() + runner.kv_cache_bytes();
  const RankCoord& c = worker.coord();
  std::fprintf(stderr,
               "tprun: GPU %d memory of dp_rank %d, pp_stage %d, tp_rank %d: weights %s, kv_cache %s, other %s, "
               "communicators %s, CUDA context %s; %s in use of %s%s\n",
               worker.device(), c.dp_rank, c.pp_stage, c.tp_rank, mib(runner.weight_bytes()).c_str(),
               mib(runner.kv_cache_bytes()).c_str(), mib(used_after_comm > held ? used_after_comm - held : 0).c_str(),
               mib(m.comm_bytes()).c_str(), mib(m.context_bytes()).c_str(), mib(total_b - free_b).c_str(),
               mib(total_b).c_str(), tuning().share_gpus ? " (GPU shared by several ranks: other includes theirs)" : "");
}

}  // namespace

/// SessionOptions::max_batch 0 on CUDA: the most slots (<= kMaxAutoBatch) whose memory plan for this
/// rank's stage fits in gpu_memory_utilization x total minus what the GPU already holds, the least over
/// the replica's ranks (they must run the same schedule). 1 when nothing fits (check_memory_plan then
/// says so). Collective over worker.replica_ranks(); prints the choice once.
static int auto_max_batch(CudaWorker& worker, const Manifest& m, const SessionOptions& opts, int max_seq_len, size_t free_b,
                   size_t total_b) {
  const RankGrid& grid = worker.grid();
  const int stage = worker.coord().pp_stage;
  const double used = static_cast<double>(total_b - free_b);
  // Ranks sharing one GPU (TPSHARD_TEST_SHARE_GPUS) each see the whole GPU free: they split the budget.
  const int sharing = tuning().share_gpus ? std::max(1, worker.env().local_world_size) : 1;
  const double budget = (opts.gpu_memory_utilization * static_cast<double>(total_b) - used) / sharing;
  auto fits = [&](int b) {
    const MemoryPlan p = plan_memory(m, grid.tp_size, b, max_seq_len, opts.model_dir, 0, grid.pp_size);
    uint64_t t = 0;
    for (const RankMemory& r : p.ranks)
      if (r.pp_stage == stage) t = std::max(t, r.total_bytes);
    return static_cast<double>(t) <= budget;
  };
  int lo = 1, hi = kMaxAutoBatch;  // the plan grows with the batch: the largest b that fits, by bisection
  if (!fits(lo)) {
    hi = lo;
  } else {
    while (lo < hi) {
      const int mid = (lo + hi + 1) / 2;
      if (fits(mid)) lo = mid;
      else hi = mid - 1;
    }
  }
  int chosen = lo;
  for (const std::string& s : worker.replica_ranks()->all_gather(std::to_string(lo))) chosen = std::min(chosen, std::stoi(s));
  if (!opts.quiet && worker.replica_ranks()->rank() == 0 && worker.coord().dp_rank == 0) {
    const MemoryPlan p = plan_memory(m, grid.tp_size, chosen, max_seq_len, opts.model_dir, 0, grid.pp_size);
    std::fprintf(stderr,
                 "tprun: --max-batch %d (chosen: the most kv_cache slots of %d positions, up to %d, that fit in %.2f of "
                 "GPU memory; kv_cache %s per rank; --max-batch sets it)\n",
                 chosen, max_seq_len, kMaxAutoBatch, opts.gpu_memory_utilization, mib(p.kv_cache_bytes).c_str());
  }
  return chosen;
}

void run_cuda_worker(const SessionOptions& opts, const std::function<void(RankContext&)>& fn) {
  CudaWorker worker(opts);
  const RankCoord me = worker.coord();
  const RankGrid& grid = worker.grid();
  try {
    const Manifest manifest = load_manifest(opts.model_dir);
    // its own shard only: the (pp_stage, tp_rank) file of the (pp_size, tp_size) layout
    const std::unique_ptr<ShardReader> shard =
        open_rank_shard(manifest, opts.model_dir, grid.tp_size, me.tp_rank, grid.pp_size, me.pp_stage);
    const int max_seq_len = ::tpshard::effective_max_seq_len(opts, manifest.model);  // runtime/session_types.h: as the CPU backend
    size_t free_b = 0, total_b = 0;
    TPS_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    const int max_batch =
        opts.max_batch > 0 ? opts.max_batch : auto_max_batch(worker, manifest, opts, max_seq_len, free_b, total_b);
    check_memory_plan(manifest, opts.model_dir, grid.tp_size, max_batch, max_seq_len, free_b, total_b, grid.pp_size,
                      me.pp_stage);

    LoadOptions lo;
    lo.verify_hashes = opts.verify_hashes;
    lo.reader_threads = default_reader_threads(worker.env().local_world_size);  // the ranks of this host share its cores
    lo.direct_io = tuning().load_direct_io;
    WeightArena arena(*shard, lo);
    std::unique_ptr<DeviceStageLink> link;
    if (grid.pp_size > 1)
      link = std::make_unique<DeviceStageLink>(me.pp_stage, grid.pp_size, worker.to_prev_stage(), worker.to_next_stage());
    CudaRunnerOptions ro;
    ro.max_batch = max_batch;
    ro.max_seq_len = max_seq_len;
    ro.use_cuda_graphs = tuning().cuda_graphs;
    ro.lookahead = tuning().lookahead;
    ro.pdl = tuning().pdl;
    ro.cascade_attention = tuning().cascade_attention;
    ro.link = link.get();
    ro.micro_batches = opts.micro_batches;
    std::unique_ptr<ModelRunner> runner = make_cuda_runner(manifest, me.tp_rank, grid.tp_size, arena, worker.comm(), ro);

    const std::unique_ptr<Tokenizer> tokenizer = load_model_tokenizer(opts.model_dir, manifest.model);

    RankContext ctx;
    ctx.tp_rank = me.tp_rank;
    ctx.tp_size = grid.tp_size;
    ctx.pp_stage = me.pp_stage;
    ctx.pp_size = grid.pp_size;
    ctx.dp_rank = me.dp_rank;
    ctx.dp_size = grid.dp_size;
    ctx.replicas = worker.replica_exchange();
    ctx.replica_ranks = worker.replica_ranks();
    ctx.device = Device::Cuda;
    ctx.manifest = &manifest;
    ctx.model_dir = opts.model_dir;
    ctx.runner = runner.get();
    ctx.comm = &worker.comm();
    ctx.tokenizer = tokenizer.get();
    fn(ctx);
    worker.comm().synchronize();
    if (!opts.quiet) print_rank_memory(worker, *runner);
  } catch (const std::exception& e) {
    worker.report_failure(e.what());
    throw;
  }
}

}  // namespace tpshard::cuda
