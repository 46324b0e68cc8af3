// cmd_bench_load.cpp: `tprun MODEL_DIR --tp N bench-load` (CUDA builds): every rank loads its own shard
// into a WeightArena and reports load time, GB/s, peak host RSS and device memory by category; rank 0
// prints one table with the spread between ranks (numbers gathered over the communicator). Without a visible GPU, or
// with --device cpu, it stops before starting any worker (builds without CUDA: main.cpp's stub).
// Also the hidden `comm-test` subcommand: the communicator's (NCCL or peer) all_reduce / all_gather / broadcast with rank-dependent,
// exactly checkable data (used by scripts/gpu_check.sh, e.g. for the two-"node" run), optional fault
// injection (--fail-rank) and a hold time for kill tests.
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <thread>
#include <vector>

#include "format/hash.h"
#include "model/manifest.h"
#include "model/memory_plan.h"
#include "model/rank_shard.h"
#include "format/shard_file.h"
#include "runtime/process_memory.h"
#include "runtime/cuda/check.h"
#include "runtime/cuda/cuda_runner.h"
#include "runtime/cuda/weight_arena.h"
#include "runtime/load/load_options.h"
#include "runtime/cuda/worker.h"
#include "tools/cli_validators.h"
#include "tools/tprun/commands.h"

namespace tpshard::tprun {
namespace {

using Clock = std::chrono::steady_clock;

struct BenchLoadOptions {
  size_t ring_buffers = 0;  ///< 0: 2 per reader thread
  size_t ring_mib = 4;
  int readers = 0;          ///< 0: default_reader_threads(local ranks)
  bool no_verify = false;
  bool direct_io = false;
  std::string io = "auto";  ///< read path: auto (io_uring for O_DIRECT), pread, uring
  int queue_depth = 0;      ///< io_uring reads in flight per reader (0: the loader's default)
  bool no_runner = false;
  int repeat = 1;
  bool json = false;
  std::string pin = "register";    ///< how the ring is pinned (load::parse_ring_pinning)
  std::string hash_impl = "auto";  ///< format/hash.h set_xxh3_implementation (A/B of the XXH3 code)
};

/// Per-rank numbers, gathered to every rank as raw doubles.
struct RankStats {
  double load_s, gbps, read_s, hash_s, zstd_s, setup_s;
  double rss_before_mib, rss_peak_mib, rss_after_load_mib;
  double rss_anon_load_mib, rss_file_load_mib;  ///< RssAnon / RssFile sampled while the last load ran (its largest)
  double readers, pinned_mib;                    ///< what the loader used
  double weights_mib, kv_cache_mib, workspace_mib, context_mib, comm_mib, total_mib;
  double file_mib;
};

double mib(double b) { return b / double(1 << 20); }

double current_rss_mib() { return mib(double(current_rss_bytes())); }

/// Peak RSS of this program image (VmHWM), not ru_maxrss, which fork/exec inherit from the parent.
double peak_rss_mib() { return mib(double(peak_rss_bytes())); }

void run_bench_load(const GlobalOptions& g, const BenchLoadOptions& o) {
  using namespace tpshard::cuda;
  CudaWorker worker(g.session);
  const int rank = worker.tp_rank();
  try {
    const Manifest manifest = load_manifest(g.session.model_dir);
    const std::unique_ptr<ShardReader> shard = open_rank_shard(manifest, g.session.model_dir, worker.tp_size(), rank);
    LoadOptions lo;
    lo.ring_buffers = o.ring_buffers;
    lo.ring_buffer_bytes = o.ring_mib << 20;
    lo.reader_threads = o.readers > 0 ? o.readers : default_reader_threads(worker.env().local_world_size);
    lo.verify_hashes = !o.no_verify && g.session.verify_hashes;
    set_xxh3_implementation(o.hash_impl);
    lo.pinning = load::parse_ring_pinning(o.pin, "bench-load --pin");
    lo.direct_io = o.direct_io;
    lo.io = load::parse_io_engine(o.io, "bench-load --io");
    lo.queue_depth = o.queue_depth;

    RankStats s{};
    s.rss_before_mib = current_rss_mib();
    size_t free0 = 0, total = 0;
    TPS_CUDA_CHECK(cudaMemGetInfo(&free0, &total));
    LoadReport best;
    best.seconds = 1e30;
    std::string read_path;  // what the loader used (the same on every rank)
    int depth = 1;
    std::unique_ptr<WeightArena> arena;
    std::atomic<uint64_t> anon_max{0}, file_max{0};
    for (int i = 0; i < std::max(1, o.repeat); ++i) {
      arena.reset();
      worker.comm().barrier();  // all ranks start together, so the spread means something
      LoadReport rep;
      std::atomic<bool> loading{true};
      std::thread sampler([&] {  // RssAnon / RssFile every 5 ms while the load runs (the ring is freed after it)
        while (loading.load()) {
          anon_max = std::max<uint64_t>(anon_max.load(), rss_anon_bytes());
          file_max = std::max<uint64_t>(file_max.load(), rss_file_bytes());
          std::this_thread::sleep_for(std::chrono::milliseconds(5));
        }
      });
      try {
        arena = std::make_unique<WeightArena>(*shard, lo, &rep);
      } catch (...) {
        loading = false;
        sampler.join();
        throw;
      }
      loading = false;
      sampler.join();
      if (rep.seconds < best.seconds) best = rep;
      read_path = rep.io;
      depth = rep.queue_depth;
    }
    s.rss_anon_load_mib = mib(double(anon_max.load()));
    s.rss_file_load_mib = mib(double(file_max.load()));
    s.readers = best.reader_threads;
    s.pinned_mib = mib(double(best.pinned_bytes));
    s.rss_after_load_mib = current_rss_mib();  // current, not peak: tells a transient peak from a lasting one
    size_t free1 = 0;
    TPS_CUDA_CHECK(cudaMemGetInfo(&free1, &total));
    s.load_s = best.seconds;
    s.gbps = double(best.file_bytes) / best.seconds / 1e9;
    s.read_s = best.read_seconds;
    s.hash_s = best.hash_seconds;
    s.zstd_s = best.decompress_seconds;
    s.setup_s = best.setup_seconds;
    s.file_mib = mib(double(best.file_bytes));
    s.weights_mib = mib(double(free0) - double(free1));
    s.context_mib = mib(double(worker.marks().context_bytes()));
    s.comm_mib = mib(double(worker.marks().comm_bytes()));
    s.kv_cache_mib = s.workspace_mib = std::nan("");
    if (!o.no_runner) {
      const int seq = ::tpshard::effective_max_seq_len(g.session, manifest.model);
      const int batch = g.session.max_batch > 0 ? g.session.max_batch : kDefaultCpuMaxBatch;  // the runner's share, as before
      const ::tpshard::MemoryPlan plan =
          ::tpshard::plan_memory(manifest, worker.tp_size(), batch, seq, g.session.model_dir);
      CudaRunnerOptions ro;
      ro.max_batch = batch;
      ro.max_seq_len = seq;
      auto runner = make_cuda_runner(manifest, rank, worker.tp_size(), *arena, worker.comm(), ro);
      size_t free2 = 0;
      TPS_CUDA_CHECK(cudaMemGetInfo(&free2, &total));
      double runner_mib = mib(double(free1) - double(free2));
      s.kv_cache_mib = mib(double(plan.kv_cache_bytes));
      s.workspace_mib = runner_mib - s.kv_cache_mib;  // everything else the runner allocated
      worker.comm().barrier();
    }
    size_t free_end = 0;
    TPS_CUDA_CHECK(cudaMemGetInfo(&free_end, &total));
    s.total_mib = mib(double(total) - double(free_end));
    s.rss_peak_mib = peak_rss_mib();

    std::vector<uint8_t> all = worker.comm().all_gather_host(&s, sizeof(s));
    if (rank != 0) return;
    std::vector<RankStats> st(size_t(worker.tp_size()));
    std::memcpy(st.data(), all.data(), all.size());
    auto cell = [](double v) { return std::isnan(v) ? std::string("n/a") : std::to_string(int64_t(std::llround(v))); };
    if (o.json) {
      for (int r = 0; r < worker.tp_size(); ++r) {
        const RankStats& x = st[size_t(r)];
        std::printf(
            "{\"rank\": %d, \"tp_size\": %d, \"load_s\": %.4f, \"gbps\": %.3f, \"read_s\": %.4f, \"hash_s\": %.4f, "
            "\"zstd_s\": %.4f, \"setup_s\": %.4f, \"file_mib\": %.1f, \"rss_before_mib\": %.1f, \"rss_peak_mib\": %.1f, "
            "\"rss_after_load_mib\": %.1f, "
            "\"weights_mib\": %.1f, \"kv_cache_mib\": %s, \"workspace_mib\": %s, \"context_mib\": %.1f, "
            "\"comm_mib\": %.1f, \"comm\": \"%s\", \"device_total_mib\": %.1f, \"verify\": %s, \"pinned_mib\": %.1f, \"readers\": %d, "
            "\"rss_anon_load_mib\": %.1f, \"rss_file_load_mib\": %.1f, \"io\": \"%s\", \"queue_depth\": %d}\n",
            r, worker.tp_size(), x.load_s, x.gbps, x.read_s, x.hash_s, x.zstd_s, x.setup_s, x.file_mib,
            x.rss_before_mib, x.rss_peak_mib, x.rss_after_load_mib, x.weights_mib, cell(x.kv_cache_mib) == "n/a" ? "null" : cell(x.kv_cache_mib).c_str(),
            cell(x.workspace_mib) == "n/a" ? "null" : cell(x.workspace_mib).c_str(), x.context_mib, x.comm_mib,
            worker.comm().name(), x.total_mib, lo.verify_hashes ? "true" : "false", x.pinned_mib, int(x.readers),
            x.rss_anon_load_mib, x.rss_file_load_mib, read_path.c_str(), depth);
      }
    }
    std::printf("bench-load %s tp %d: ring %.0f MiB pinned by %s (%zu MiB buffers), %d readers, reads by %s (depth %d), "
                "hashes %s (XXH3 %s), best of %d\n",
                g.session.model_dir.c_str(), worker.tp_size(), st[0].pinned_mib,
                lo.pinning == load::RingPinning::HostAlloc ? "cudaHostAlloc" : lo.pinning == load::RingPinning::RegisterUpfront ? "cudaHostRegister up front" : "cudaHostRegister per buffer on first use", o.ring_mib, int(st[0].readers),
                read_path.c_str(), depth, lo.verify_hashes ? "verified" : "not verified", xxh3_implementation(),
                std::max(1, o.repeat));
    std::printf("%4s %8s %7s %7s %7s %9s %9s %10s %9s %10s %9s %7s %9s %8s %8s\n", "rank", "load_s", "GB/s", "read_s",
                "hash_s", "file_MiB", "RSS_MiB", "peakRSS", "weights", "kv_cache", "workspace", "ctx", "comm",
                "RssAnon", "RssFile");
    double tmin = 1e30, tmax = 0;
    for (int r = 0; r < worker.tp_size(); ++r) {
      const RankStats& x = st[size_t(r)];
      tmin = std::min(tmin, x.load_s);
      tmax = std::max(tmax, x.load_s);
      std::printf("%4d %8.3f %7.2f %7.3f %7.3f %9.0f %9.0f %10.0f %9.0f %10s %9s %7.0f %9.0f %8.0f %8.0f\n", r, x.load_s,
                  x.gbps, x.read_s, x.hash_s, x.file_mib, x.rss_before_mib, x.rss_peak_mib, x.weights_mib,
                  cell(x.kv_cache_mib).c_str(), cell(x.workspace_mib).c_str(), x.context_mib, x.comm_mib,
                  x.rss_anon_load_mib, x.rss_file_load_mib);
    }
    std::printf("spread: load time min %.3f s, max %.3f s (max/min %.2f); device MiB: weights, kv_cache and "
                "workspace from cudaMemGetInfo deltas (kv_cache by formula), ctx = CUDA context, comm = communicator (%s); "
                "host MiB: RssAnon / RssFile = the largest private / file-backed resident set while loading\n",
                tmin, tmax, tmax / std::max(tmin, 1e-9), worker.comm().name());
    std::fflush(stdout);
  } catch (const std::exception& e) {
    worker.report_failure(e.what());
    throw;
  }
}

struct CommTestOptions {
  double hold_seconds = 0;
  int fail_rank = -1;
  size_t max_mib = 256;
};

template <typename Fill>
std::vector<float> host_pattern(size_t n, Fill f) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = f(i);
  return v;
}

void run_comm_test(const GlobalOptions& g, const CommTestOptions& o) {
  using namespace tpshard::cuda;
  CudaWorker worker(g.session);
  const int rank = worker.tp_rank();
  const int n = worker.tp_size();
  try {
    DeviceCommunicator& comm = worker.comm();
    if (rank == o.fail_rank) throw Error("rank " + std::to_string(rank) + ": injected failure (comm-test --fail-rank)",
                                         "this failure was requested on the command line");
    // all_reduce_sum, f32: rank r contributes (r + 1) * (i % 7 + 1); the sum is (i % 7 + 1) * n(n+1)/2 exactly.
    std::string report;
    for (size_t count : {size_t(1), size_t(1000), size_t(1) << 20, (size_t(1) << 22) + 3}) {
      auto mine = host_pattern(count, [&](size_t i) { return float((rank + 1) * int(i % 7 + 1)); });
      float* d = nullptr;
      TPS_CUDA_CHECK(cudaMalloc(&d, count * sizeof(float)));
      TPS_CUDA_CHECK(cudaMemcpy(d, mine.data(), count * sizeof(float), cudaMemcpyHostToDevice));
      // A pageable cudaMemcpy may return before its DMA has landed; the communicator's stream does not
      // wait for the legacy stream, so wait here (a 4 MiB all_reduce once read an unwritten tail).
      TPS_CUDA_CHECK(cudaDeviceSynchronize());
      comm.all_reduce_sum(d, count, DType::F32);
      comm.synchronize();
      TPS_CUDA_CHECK(cudaMemcpy(mine.data(), d, count * sizeof(float), cudaMemcpyDeviceToHost));
      TPS_CUDA_CHECK(cudaFree(d));
      for (size_t i = 0; i < count; ++i) {
        float want = float(int(i % 7 + 1) * n * (n + 1) / 2);
        TPS_CHECK(mine[i] == want,
                  "comm-test rank " + std::to_string(rank) + ": all_reduce_sum[" + std::to_string(i) + "] of " +
                      std::to_string(count) + " = " + std::to_string(mine[i]) + ", expected " + std::to_string(want),
                  std::string(comm.name()) + " returned a wrong sum: check the GPUs (NCCL: NCCL_ALGO / NCCL_PROTO; TPSHARD_COMM=nccl to compare)");
      }
    }
    report += "all_reduce_sum ok";
    // all_gather, f32: rank r sends r * 1000 + (i % 1000); recv[r * count + i] must equal exactly that.
    {
      const size_t count = 12345;
      auto mine = host_pattern(count, [&](size_t i) { return float(rank * 1000 + int(i % 1000)); });
      float *ds = nullptr, *dr = nullptr;
      TPS_CUDA_CHECK(cudaMalloc(&ds, count * sizeof(float)));
      TPS_CUDA_CHECK(cudaMalloc(&dr, count * n * sizeof(float)));
      TPS_CUDA_CHECK(cudaMemcpy(ds, mine.data(), count * sizeof(float), cudaMemcpyHostToDevice));
      TPS_CUDA_CHECK(cudaDeviceSynchronize());  // the DMA has landed (see above)
      comm.all_gather(ds, dr, count, DType::F32);
      comm.synchronize();
      std::vector<float> got(count * size_t(n));
      TPS_CUDA_CHECK(cudaMemcpy(got.data(), dr, got.size() * sizeof(float), cudaMemcpyDeviceToHost));
      TPS_CUDA_CHECK(cudaFree(ds));
      TPS_CUDA_CHECK(cudaFree(dr));
      for (int r = 0; r < n; ++r)
        for (size_t i = 0; i < count; ++i)
          TPS_CHECK(got[size_t(r) * count + i] == float(r * 1000 + int(i % 1000)),
                    "comm-test rank " + std::to_string(rank) + ": all_gather block " + std::to_string(r) + " element " +
                        std::to_string(i) + " is wrong",
                    std::string(comm.name()) + " all_gather mixed up ranks");
      report += ", all_gather ok";
    }
    // broadcast from the last rank: bytes (root * 31 + i) & 0xff.
    {
      const size_t bytes = 100003;
      const int root = n - 1;
      std::vector<uint8_t> h(bytes);
      for (size_t i = 0; i < bytes; ++i) h[i] = uint8_t(rank == root ? (root * 31 + int(i)) & 0xff : 0);
      void* d = nullptr;
      TPS_CUDA_CHECK(cudaMalloc(&d, bytes));
      TPS_CUDA_CHECK(cudaMemcpy(d, h.data(), bytes, cudaMemcpyHostToDevice));
      TPS_CUDA_CHECK(cudaDeviceSynchronize());  // the DMA has landed (see above)
      comm.broadcast(d, bytes, root);
      comm.synchronize();
      TPS_CUDA_CHECK(cudaMemcpy(h.data(), d, bytes, cudaMemcpyDeviceToHost));
      TPS_CUDA_CHECK(cudaFree(d));
      for (size_t i = 0; i < bytes; ++i)
        TPS_CHECK(h[i] == uint8_t((root * 31 + int(i)) & 0xff),
                  "comm-test rank " + std::to_string(rank) + ": broadcast byte " + std::to_string(i) + " is wrong",
                  std::string(comm.name()) + " broadcast failed");
      report += ", broadcast ok";
    }
    comm.barrier();
    // Bus bandwidth of a large f16 all_reduce (nccl-tests' busbw = algbw * 2(n-1)/n).
    double busbw = 0;
    {
      const size_t bytes = o.max_mib << 20;
      void* d = nullptr;
      TPS_CUDA_CHECK(cudaMalloc(&d, bytes));
      TPS_CUDA_CHECK(cudaMemset(d, 0, bytes));
      comm.all_reduce_sum(d, bytes / 2, DType::F16);
      comm.synchronize();
      const int iters = 10;
      auto t0 = Clock::now();
      for (int i = 0; i < iters; ++i) comm.all_reduce_sum(d, bytes / 2, DType::F16);
      comm.synchronize();
      double s = std::chrono::duration<double>(Clock::now() - t0).count() / iters;
      busbw = n > 1 ? double(bytes) / s / 1e9 * 2.0 * (n - 1) / n : 0.0;
      TPS_CUDA_CHECK(cudaFree(d));
    }
    // Hold: keep all_reducing (for kill tests: a dead peer must bring this rank down, not hang it).
    auto hold_end = Clock::now() + std::chrono::milliseconds(int64_t(o.hold_seconds * 1000));
    if (o.hold_seconds > 0) {
      float* d = nullptr;
      TPS_CUDA_CHECK(cudaMalloc(&d, 4096 * sizeof(float)));
      while (Clock::now() < hold_end) {
        comm.all_reduce_sum(d, 4096, DType::F32);
        comm.synchronize();
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      TPS_CUDA_CHECK(cudaFree(d));
    }
    comm.barrier();
    char host[256] = {0};
    gethostname(host, sizeof(host) - 1);
    std::fprintf(stderr, "comm-test rank %d: device %d, host %s: %s\n", rank, worker.device(), host, report.c_str());
    if (rank == 0)
      std::printf("comm-test ok: world %d, %s, all_reduce %zu MiB f16 busbw %.1f GB/s, communicator %s\n", n,
                  report.c_str(), o.max_mib, busbw, comm.name());
    std::fflush(stdout);
  } catch (const std::exception& e) {
    worker.report_failure(e.what());
    throw;
  }
}

}  // namespace

void add_bench_load_command(CLI::App& app, GlobalOptions& g) {
  auto o = std::make_shared<BenchLoadOptions>();
  CLI::App* sub = app.add_subcommand("bench-load", "Load this rank's shard onto its GPU and report time, GB/s and memory");
  sub->add_option("--ring-buffers", o->ring_buffers, "pinned host buffers in the ring (0: queue depth + 1 per reader thread)")
      ->capture_default_str()->check(tpshard::cli::integer_in_range(0, 1024));
  sub->add_option("--ring-mib", o->ring_mib, "MiB per ring buffer")->capture_default_str()
      ->check(tpshard::cli::integer_in_range(1, 65536));
  sub->add_option("--readers", o->readers, "reader threads (0: the host's hardware threads / its ranks, 2..32)")
      ->capture_default_str()->check(tpshard::cli::integer_in_range(0, 256));
  sub->add_flag("--no-verify", o->no_verify, "skip the XXH3 check while streaming (to measure its cost)");
  sub->add_flag("--direct-io", o->direct_io, "read with O_DIRECT (bypasses the page cache)");
  sub->add_option("--io", o->io, "read path: auto (io_uring for O_DIRECT reads, pread otherwise), pread, uring")
      ->check(CLI::IsMember({"auto", "pread", "uring"}))
      ->capture_default_str();
  sub->add_option("--queue-depth", o->queue_depth, "io_uring reads in flight per reader thread (0: 4)")
      ->capture_default_str()->check(tpshard::cli::integer_in_range(0, 64));
  sub->add_option("--pin", o->pin, "how the ring is pinned: register (each buffer cudaHostRegister'ed on first use, huge pages advised), register-upfront (the whole ring before any read) or alloc (cudaHostAlloc)")
      ->check(CLI::IsMember({"register", "register-upfront", "alloc"}))
      ->capture_default_str();
  sub->add_option("--hash-impl", o->hash_impl, "XXH3 code: auto (the widest this CPU runs), sse2, avx2, avx512")
      ->capture_default_str();
  sub->add_flag("--no-runner", o->no_runner, "do not build the runner (no kv_cache / workspace numbers)");
  sub->add_option("--repeat", o->repeat, "load this many times, report the fastest")->capture_default_str()
      ->check(tpshard::cli::integer_in_range(1, 1000));
  sub->add_flag("--json", o->json, "also print one JSON line per rank");
  sub->callback([&g, o] { run_bench_load(g, *o); });
  // Without a GPU, say so before the launcher or CudaWorker answer with rank / process-count messages.
  g.preflight.push_back([sub, &g] {
    if (!sub->parsed()) return;
    if (g.session.pp_size > 1 || g.session.dp_size > 1)
      throw UsageError("bench-load --pp " + std::to_string(g.session.pp_size) + " --dp " +
                           std::to_string(g.session.dp_size) + ": bench-load measures one tensor-parallel group",
                       "run it with --tp only (a stage's shard loads the same way as a tp rank's)");
    if (g.session.device == Device::Cpu)
      throw_bench_load_needs_gpu("--device cpu selects the CPU backend, which has no bench-load");
    if (resolve_device(Device::Auto) != Device::Cuda) {
      const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
      throw_bench_load_needs_gpu(std::string("no GPU is visible to this process") +
                                 (visible ? std::string(" (CUDA_VISIBLE_DEVICES=") + visible + ")" : std::string()));
    }
  });

  auto c = std::make_shared<CommTestOptions>();
  CLI::App* ct = app.add_subcommand("comm-test", "communicator self-test with rank-dependent data (for gpu_check.sh)");
  ct->group("");  // hidden from --help
  ct->add_option("--hold-seconds", c->hold_seconds, "keep all_reducing this long (kill tests)")
      ->check(tpshard::cli::non_negative_for(c->hold_seconds));
  ct->add_option("--fail-rank", c->fail_rank, "this rank throws an error after joining (failure tests)");
  ct->add_option("--max-mib", c->max_mib, "bytes of the bandwidth all_reduce")->capture_default_str()
      ->check(tpshard::cli::integer_in_range(1, 65536));
  ct->callback([&g, c] { run_comm_test(g, *c); });
}

}  // namespace tpshard::tprun
