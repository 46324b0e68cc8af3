// test_custom_all_reduce.cpp: CustomAllReduce (runtime/cuda/custom_all_reduce.h) with ranks as threads of
// this process, one GPU each, one NcclCommunicator each (2 GPUs; also 3, 4 and all GPUs when present).
// Checks exact results against the host fp32 rank-order sum (and NCCL's bits for 2 ranks), 200
// back-to-back calls of mixed dtypes and sizes, CUDA-graph replays mixed with eager calls, eligible(),
// the collective refusals (tp_size 1, TPSHARD_NO_CUSTOM_ALL_REDUCE), and prints latency vs NCCL.
#include <cuda_runtime.h>
#include <doctest/doctest.h>
#include <nccl.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "format/dtype.h"
#include "format/error.h"
#include "runtime/cuda/check.h"
#include "tests/gpu/collective_test_util.h"
#include "runtime/cuda/cuda_session.h"
#include "runtime/cuda/custom_all_reduce.h"
#include "runtime/cuda/nccl_comm.h"

using namespace tpshard;
using namespace tpshard::test;
using tpshard::cuda::CustomAllReduce;
using tpshard::cuda::CustomAllReduceSettings;
using tpshard::cuda::custom_all_reduce_settings;
using tpshard::cuda::NcclCommunicator;

namespace {

constexpr size_t kMaxBytes = size_t(1) << 20;

/// Runs fn(rank, comm) on n threads (rank r on GPU r, its own NcclCommunicator); rethrows the first error.
void run_ranks(int n, const std::function<void(int, NcclCommunicator&)>& fn) {
  ncclUniqueId id;
  TPS_NCCL_CHECK(ncclGetUniqueId(&id));
  std::vector<std::exception_ptr> errors(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        TPS_CUDA_CHECK(cudaSetDevice(r));
        NcclCommunicator comm(id, r, n, 60.0);
        fn(r, comm);
        comm.barrier();  // nobody frees its region while a peer may still read it
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

/// Skips (with a message) unless n GPUs that are all peers exist.
bool have_peer_gpus(int n) {
  if (cuda::cuda_device_count() < n) {
    MESSAGE("skipped: the custom all_reduce tests need >= " << n << " GPUs");
    return false;
  }
  if (!all_peers(n)) {
    MESSAGE("skipped: GPUs 0.." << n - 1 << " are not all peers (no P2P access)");
    return false;
  }
  return true;
}

// ---- host data in a dtype, and the reference sum ----

/// "" when equal, else the first mismatches.
std::string compare(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want, DType t,
                    const std::string& what) {
  if (got.size() != want.size())
    return what + ": size " + std::to_string(got.size()) + " != " + std::to_string(want.size());
  if (std::memcmp(got.data(), want.data(), got.size()) == 0) return "";
  const size_t n = got.size() / dtype_size(t);
  size_t bad = 0;
  std::string first;
  for (size_t i = 0; i < n; ++i)
    if (std::memcmp(got.data() + i * dtype_size(t), want.data() + i * dtype_size(t), dtype_size(t)) != 0) {
      if (bad < 3)
        first += " [" + std::to_string(i) + "] got " + std::to_string(load(got, i, t)) + " want " +
                 std::to_string(load(want, i, t)) + ";";
      ++bad;
    }
  return what + ": " + std::to_string(bad) + " of " + std::to_string(n) + " elements differ:" + first;
}

std::string label(int n, int rank, DType t, size_t count, const std::string& extra = "") {
  return "tp " + std::to_string(n) + " rank " + std::to_string(rank) + " " + dtype_name(t) + " count " +
         std::to_string(count) + extra;
}

std::unique_ptr<CustomAllReduce> create_or_fail(NcclCommunicator& comm, Failures& f) {
  std::string why;
  auto car = CustomAllReduce::try_create(comm, kMaxBytes, &why);
  if (!car)
    f.add("tp " + std::to_string(comm.size()) + " rank " + std::to_string(comm.rank()) +
          ": try_create: " + why);
  return car;
}

/// run_ranks with a CustomAllReduce (kMaxBytes) per rank: fn(rank, comm, car). The objects are destroyed
/// only after a barrier: a peer may read this rank's region until its last call completed on every rank.
void run_with_car(int n, Failures& f,
                  const std::function<void(int, NcclCommunicator&, CustomAllReduce&)>& fn) {
  run_ranks(n, [&](int rank, NcclCommunicator& comm) {
    auto car = create_or_fail(comm, f);
    if (!car) return;
    fn(rank, comm, *car);
    comm.barrier();
  });
}

const DType kDTypes[] = {DType::F32, DType::F16, DType::BF16};

}  // namespace

TEST_CASE("CustomAllReduce: tp_size 1 is refused (try_create nullptr + reason, constructor throws)") {
  TPS_CUDA_CHECK(cudaSetDevice(0));
  ncclUniqueId id;
  TPS_NCCL_CHECK(ncclGetUniqueId(&id));
  NcclCommunicator comm(id, 0, 1, 30.0);
  std::string why;
  CHECK(CustomAllReduce::try_create(comm, kMaxBytes, &why) == nullptr);
  CHECK(why.find("tp_size 1") != std::string::npos);
  CHECK_THROWS_AS(CustomAllReduce(comm, kMaxBytes), Error);
}

TEST_CASE(
    "CustomAllReduce: exact sums for every dtype and size (= host fp32 rank-order sum; = NCCL at tp 2)") {
  if (!have_peer_gpus(2)) return;
  short_spin_timeout();
  for (int n : rank_counts(/*peers_only=*/false)) {
    if (!all_peers(n)) continue;
    Failures f;
    run_with_car(n, f, [&](int rank, NcclCommunicator& comm, CustomAllReduce& car) {
      if (car.tp_rank() != rank || car.tp_size() != n || car.max_bytes() != kMaxBytes)
        f.add("tp " + std::to_string(n) + ": tp_rank/tp_size/max_bytes accessors wrong");
      cudaStream_t s = comm.stream();
      int salt = 0;
      for (DType t : kDTypes) {
        const size_t e = dtype_size(t);
        // 8 elements, one decode row, 48 rows, an uneven number of packs (1001), exactly max_bytes.
        for (size_t count : {size_t(8), size_t(4096), size_t(4096 * 48), size_t(1001 * 8), kMaxBytes / e}) {
          ++salt;
          const auto input = make_input(count, t, rank, salt);
          DeviceMem mem(input.size() + 16);
          void* buf = static_cast<uint8_t*>(mem.ptr) + 16;  // not the start of an allocation
          TPS_CUDA_CHECK(cudaMemcpyAsync(buf, input.data(), input.size(), cudaMemcpyHostToDevice, s));
          if (!car.eligible(buf, count, t)) {
            f.add(label(n, rank, t, count, ": not eligible"));
            continue;
          }
          car.all_reduce_sum(buf, count, t, s);
          const auto got = download(buf, input.size(), s);
          const std::string bad = compare(got, reference_sum(count, t, n, salt), t, label(n, rank, t, count));
          if (!bad.empty()) f.add(bad);
          if (n == 2) {  // NCCL's sum of two values is the correctly rounded a + b, as ours
            TPS_CUDA_CHECK(cudaMemcpyAsync(buf, input.data(), input.size(), cudaMemcpyHostToDevice, s));
            comm.all_reduce_sum(buf, count, t);
            const std::string bad_nccl = compare(got, download(buf, input.size(), s), t,
                                                 label(n, rank, t, count, " (custom vs NCCL bits)"));
            if (!bad_nccl.empty()) f.add(bad_nccl);
          }
        }
      }
    });
    INFO("tp " << n);
    f.report();
  }
}

TEST_CASE("CustomAllReduce: 200 back-to-back calls of mixed dtypes and sizes, NCCL fallbacks in between") {
  if (!have_peer_gpus(2)) return;
  short_spin_timeout();
  for (int n : rank_counts(/*peers_only=*/false)) {
    if (!all_peers(n)) continue;
    Failures f;
    run_with_car(n, f, [&](int rank, NcclCommunicator& comm, CustomAllReduce& car) {
      cudaStream_t s = comm.stream();
      struct Call {
        DType t;
        size_t count;
        int salt;
        bool nccl;  ///< 8 bytes of f32: not eligible, so NCCL takes it (as in the transformer)
        std::unique_ptr<DeviceMem> mem;
      };
      const size_t counts[] = {8, 4096, 4096 * 48, 1001 * 8, 64};
      std::vector<Call> calls;
      for (int k = 0; k < 200; ++k) {
        Call c;
        c.nccl = k % 25 == 24;
        c.t = c.nccl ? DType::F32 : kDTypes[k % 3];
        c.count = c.nccl ? 2 : counts[(k / 3) % 5];  // the sizes change between consecutive calls
        c.salt = 1000 + k;
        std::vector<uint8_t> input(c.count * dtype_size(c.t));
        if (c.nccl) {
          for (size_t i = 0; i < c.count; ++i)
            store(input, i, c.t, float(i + 10 * k + rank));  // exact in any order
        } else {
          input = make_input(c.count, c.t, rank, c.salt);
        }
        c.mem = std::make_unique<DeviceMem>(input.size());
        TPS_CUDA_CHECK(cudaMemcpy(c.mem->ptr, input.data(), input.size(), cudaMemcpyHostToDevice));
        TPS_CUDA_CHECK(cudaDeviceSynchronize());  // a pageable copy may return before its DMA landed
        if (c.nccl == car.eligible(c.mem->ptr, c.count, c.t))
          f.add("call " + std::to_string(k) + ": eligible() wrong");
        calls.push_back(std::move(c));
      }
      TPS_CUDA_CHECK(cudaDeviceSynchronize());
      for (auto& c : calls) {  // no host sync in between
        if (c.nccl) {
          comm.all_reduce_sum(c.mem->ptr, c.count, c.t);
        } else {
          car.all_reduce_sum(c.mem->ptr, c.count, c.t, s);
        }
      }
      for (size_t k = 0; k < calls.size(); ++k) {
        const Call& c = calls[k];
        std::vector<uint8_t> want(c.count * dtype_size(c.t));
        if (c.nccl) {
          for (size_t i = 0; i < c.count; ++i) store(want, i, c.t, float(n * (i + 10 * k) + n * (n - 1) / 2));
        } else {
          want = reference_sum(c.count, c.t, n, c.salt);
        }
        const std::string bad = compare(download(c.mem->ptr, want.size(), s), want, c.t,
                                        label(n, rank, c.t, c.count, " call " + std::to_string(k)));
        if (!bad.empty()) f.add(bad);
      }
    });
    INFO("tp " << n);
    f.report();
  }
}

TEST_CASE(
    "CustomAllReduce: CUDA graph of two calls replayed 100 times, data changed between replays, eager calls "
    "mixed in") {
  if (!have_peer_gpus(2)) return;
  short_spin_timeout();
  for (int n : rank_counts(/*peers_only=*/false)) {
    if (!all_peers(n)) continue;
    Failures f;
    run_with_car(n, f, [&](int rank, NcclCommunicator& comm, CustomAllReduce& car) {
      cudaStream_t s = comm.stream();
      const DType ta = DType::BF16, tb = DType::F32, tc = DType::F16;
      const size_t count_a = 4096, count_b = 4096 * 8, count_c = 1001 * 8;
      DeviceMem a(count_a * 2), b(count_b * 4), c(count_c * 2);
      cudaGraph_t graph = nullptr;
      cudaGraphExec_t exec = nullptr;
      TPS_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
      car.all_reduce_sum(a.ptr, count_a, ta, s);
      car.all_reduce_sum(b.ptr, count_b, tb, s);
      TPS_CUDA_CHECK(cudaStreamEndCapture(s, &graph));
      TPS_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
      for (int k = 0; k < 100; ++k) {
        const auto in_a = make_input(count_a, ta, rank, 5000 + k);
        const auto in_b = make_input(count_b, tb, rank, 7000 + k);
        TPS_CUDA_CHECK(cudaMemcpyAsync(a.ptr, in_a.data(), in_a.size(), cudaMemcpyHostToDevice, s));
        TPS_CUDA_CHECK(cudaMemcpyAsync(b.ptr, in_b.data(), in_b.size(), cudaMemcpyHostToDevice, s));
        TPS_CUDA_CHECK(cudaGraphLaunch(exec, s));
        const bool eager = k % 10 == 3;  // an eager call between replays advances the same counters
        std::vector<uint8_t> in_c;
        if (eager) {
          in_c = make_input(count_c, tc, rank, 9000 + k);
          TPS_CUDA_CHECK(cudaMemcpyAsync(c.ptr, in_c.data(), in_c.size(), cudaMemcpyHostToDevice, s));
          car.all_reduce_sum(c.ptr, count_c, tc, s);
        }
        const std::string replay = " replay " + std::to_string(k);
        std::string bad = compare(download(a.ptr, in_a.size(), s), reference_sum(count_a, ta, n, 5000 + k),
                                  ta, label(n, rank, ta, count_a, replay));
        if (!bad.empty()) f.add(bad);
        bad = compare(download(b.ptr, in_b.size(), s), reference_sum(count_b, tb, n, 7000 + k), tb,
                      label(n, rank, tb, count_b, replay));
        if (!bad.empty()) f.add(bad);
        if (eager) {
          bad = compare(download(c.ptr, in_c.size(), s), reference_sum(count_c, tc, n, 9000 + k), tc,
                        label(n, rank, tc, count_c, " eager after" + replay));
          if (!bad.empty()) f.add(bad);
        }
      }
      TPS_CUDA_CHECK(cudaGraphExecDestroy(exec));
      TPS_CUDA_CHECK(cudaGraphDestroy(graph));
    });
    INFO("tp " << n);
    f.report();
  }
}

TEST_CASE("CustomAllReduce: eligible() bounds and alignment; ineligible calls throw") {
  if (!have_peer_gpus(2)) return;
  short_spin_timeout();
  Failures f;
  run_with_car(2, f, [&](int rank, NcclCommunicator& comm, CustomAllReduce& car) {
    DeviceMem mem(kMaxBytes + 64);
    uint8_t* base = static_cast<uint8_t*>(mem.ptr);
    auto expect = [&](bool cond, const char* what) {
      if (!cond) f.add("rank " + std::to_string(rank) + ": " + what);
    };
    expect(car.eligible(base, kMaxBytes / 4, DType::F32), "max_bytes of f32 eligible");
    expect(car.eligible(base, kMaxBytes / 2, DType::BF16), "max_bytes of bf16 eligible");
    expect(!car.eligible(base, (kMaxBytes + 16) / 4, DType::F32), "max_bytes + 16 of f32 not eligible");
    expect(!car.eligible(base, (kMaxBytes + 16) / 2, DType::F16), "max_bytes + 16 of f16 not eligible");
    expect(!car.eligible(base + 8, 4096, DType::F32), "8-byte aligned pointer not eligible");
    expect(!car.eligible(base + 2, 4096, DType::BF16), "2-byte aligned pointer not eligible");
    expect(car.eligible(base + 16, 4096, DType::BF16), "16-byte aligned pointer eligible");
    expect(!car.eligible(base, 4, DType::F16), "8-byte message not eligible");
    expect(!car.eligible(base, 4101, DType::F32), "message not a multiple of 16 bytes not eligible");
    expect(car.eligible(base, 4, DType::F32), "16-byte message eligible");
    bool threw = false;
    try {
      car.all_reduce_sum(base + 8, 4096, DType::F32, comm.stream());
    } catch (const Error&) {
      threw = true;
    }
    expect(threw, "all_reduce_sum of a misaligned buffer throws Error");
  });
  f.report();
}

TEST_CASE("CustomAllReduce: TPSHARD_NO_CUSTOM_ALL_REDUCE=1 makes every rank refuse") {
  if (!have_peer_gpus(2)) return;
  struct Guard {  // what TPSHARD_NO_CUSTOM_ALL_REDUCE=1 sets; restored on every exit
    CustomAllReduceSettings old = custom_all_reduce_settings();
    Guard() { custom_all_reduce_settings().enabled = false; }
    ~Guard() { custom_all_reduce_settings() = old; }
  } guard;
  Failures f;
  run_ranks(2, [&](int rank, NcclCommunicator& comm) {
    std::string why;
    if (CustomAllReduce::try_create(comm, kMaxBytes, &why) != nullptr)
      f.add("try_create succeeded although disabled");
    if (why != "disabled by TPSHARD_NO_CUSTOM_ALL_REDUCE")
      f.add("rank " + std::to_string(rank) + ": why_not = '" + why + "'");
    try {
      CustomAllReduce car(comm, kMaxBytes);
      f.add("rank " + std::to_string(rank) + ": the constructor did not throw");
    } catch (const Error& e) {
      if (std::string(e.what()).find("TPSHARD_NO_CUSTOM_ALL_REDUCE") == std::string::npos)
        f.add(std::string("constructor error does not name the variable: ") + e.what());
    }
  });
  f.report();
}

TEST_CASE("CustomAllReduce: latency vs NCCL at decode sizes (printed; results checked after timing)") {
  if (!have_peer_gpus(2)) return;
  short_spin_timeout();
  for (int n : rank_counts(/*peers_only=*/false)) {
    if (!all_peers(n)) continue;
    Failures f;
    run_with_car(n, f, [&](int rank, NcclCommunicator& comm, CustomAllReduce& car) {
      cudaStream_t s = comm.stream();
      cudaEvent_t start, stop;
      TPS_CUDA_CHECK(cudaEventCreate(&start));
      TPS_CUDA_CHECK(cudaEventCreate(&stop));
      auto elapsed_us = [&](int calls, const std::function<void()>& body) {
        TPS_CUDA_CHECK(cudaEventRecord(start, s));
        body();
        TPS_CUDA_CHECK(cudaEventRecord(stop, s));
        TPS_CUDA_CHECK(cudaEventSynchronize(stop));
        float ms = 0.f;
        TPS_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
        return double(ms) * 1000.0 / calls;
      };
      for (size_t rows : {size_t(1), size_t(48)}) {  // Llama-7B decode: rows x 4096 bf16
        const size_t count = rows * 4096;
        DeviceMem buf(count * 2);
        TPS_CUDA_CHECK(cudaMemsetAsync(buf.ptr, 0, count * 2, s));
        const int iters = 500;
        auto custom = [&] { car.all_reduce_sum(buf.ptr, count, DType::BF16, s); };
        auto nccl = [&] { comm.all_reduce_sum(buf.ptr, count, DType::BF16); };
        for (int i = 0; i < 20; ++i) {
          custom();
          nccl();
        }
        const double custom_eager = elapsed_us(iters, [&] {
          for (int i = 0; i < iters; ++i) custom();
        });
        const double nccl_eager = elapsed_us(iters, [&] {
          for (int i = 0; i < iters; ++i) nccl();
        });
        cudaGraph_t graph = nullptr;
        cudaGraphExec_t exec = nullptr;
        const int per_graph = 100, replays = 10;
        TPS_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
        for (int i = 0; i < per_graph; ++i) custom();
        TPS_CUDA_CHECK(cudaStreamEndCapture(s, &graph));
        TPS_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
        TPS_CUDA_CHECK(cudaGraphLaunch(exec, s));
        const double custom_graph = elapsed_us(per_graph * replays, [&] {
          for (int i = 0; i < replays; ++i) TPS_CUDA_CHECK(cudaGraphLaunch(exec, s));
        });
        TPS_CUDA_CHECK(cudaGraphExecDestroy(exec));
        TPS_CUDA_CHECK(cudaGraphDestroy(graph));
        if (rank == 0)
          std::printf(
              "custom all_reduce tp %d, %zu x 4096 bf16 (%zu bytes): custom %.2f us (eager) %.2f us (graph), "
              "NCCL %.2f us (eager)\n",
              n, rows, count * 2, custom_eager, custom_graph, nccl_eager);
        // Still exact after ~1000 calls of the timing loops.
        const int salt = 77 + int(rows);
        const auto input = make_input(count, DType::BF16, rank, salt);
        TPS_CUDA_CHECK(cudaMemcpyAsync(buf.ptr, input.data(), input.size(), cudaMemcpyHostToDevice, s));
        custom();
        const std::string bad =
            compare(download(buf.ptr, input.size(), s), reference_sum(count, DType::BF16, n, salt),
                    DType::BF16, label(n, rank, DType::BF16, count, " after timing"));
        if (!bad.empty()) f.add(bad);
      }
      TPS_CUDA_CHECK(cudaEventDestroy(start));
      TPS_CUDA_CHECK(cudaEventDestroy(stop));
    });
    INFO("tp " << n);
    f.report();
  }
}

// ---- all_reduce_add_norm: the all_reduce fused with the residual add and norm that follow it ----

TEST_CASE("CustomAllReduce::all_reduce_add_norm: sum over ranks + residual add + LayerNorm/RMSNorm, two outputs") {
  short_spin_timeout();
  struct Shape {
    int rows, hidden;
  };
  const Shape shapes[] = {{1, 2048}, {3, 4096}, {40, 6144}, {2, 64}, {33, 1000}};
  for (int n : rank_counts(/*peers_only=*/false)) {
    Failures f;
    run_with_car(n, f, [&](int rank, NcclCommunicator& comm, CustomAllReduce& car) {
      int salt = 0;
      for (DType t : kDTypes) {
        for (NormKind kind : {NormKind::LayerNorm, NormKind::RmsNorm}) {
          for (const Shape& sh : shapes) {
            ++salt;
            const size_t count = static_cast<size_t>(sh.rows) * sh.hidden, es = dtype_size(t);
            const bool ln = kind == NormKind::LayerNorm;
            // host data: partial sums per rank, residual (same on all ranks), biases, norm weights
            const std::vector<uint8_t> part = make_input(count, t, rank, salt);
            std::vector<float> residual(count);
            for (size_t i = 0; i < count; ++i) residual[i] = input_value(i, 97, salt) * 7.0f;
            const std::vector<uint8_t> b0 = make_input(sh.hidden, t, 11, salt), b1 = make_input(sh.hidden, t, 12, salt);
            std::vector<uint8_t> w0(sh.hidden * es), w1(sh.hidden * es), be0(sh.hidden * es), be1(sh.hidden * es);
            for (int i = 0; i < sh.hidden; ++i) {
              store(w0, i, t, 0.5f + 0.001f * float(i % 997));
              store(w1, i, t, -1.0f + 0.002f * float(i % 991));
              store(be0, i, t, 0.01f * float(i % 13) - 0.06f);
              store(be1, i, t, 0.02f * float(i % 7) - 0.07f);
            }
            // device copies; the fused call must leave `part` unchanged
            DeviceMem d_part(count * es), d_res(count * 4), d_b0(sh.hidden * es), d_b1(sh.hidden * es), d_w0(sh.hidden * es),
                d_w1(sh.hidden * es), d_be0(sh.hidden * es), d_be1(sh.hidden * es), d_o0(count * es), d_o1(count * es);
            cudaStream_t s = comm.stream();
            auto up = [&](void* dst, const void* src, size_t bytes) {
              TPS_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, s));
            };
            up(d_part.ptr, part.data(), count * es);
            up(d_res.ptr, residual.data(), count * 4);
            up(d_b0.ptr, b0.data(), sh.hidden * es);
            up(d_b1.ptr, b1.data(), sh.hidden * es);
            up(d_w0.ptr, w0.data(), sh.hidden * es);
            up(d_w1.ptr, w1.data(), sh.hidden * es);
            up(d_be0.ptr, be0.data(), sh.hidden * es);
            up(d_be1.ptr, be1.data(), sh.hidden * es);
            cuda::AddNormParams p;
            p.residual = static_cast<float*>(d_res.ptr);
            p.add0 = d_part.ptr;
            p.add_bias0 = d_b0.ptr;
            p.add_bias1 = d_b1.ptr;
            p.weight0 = d_w0.ptr;
            p.bias0 = ln ? d_be0.ptr : nullptr;
            p.out0 = d_o0.ptr;
            p.weight1 = d_w1.ptr;
            p.bias1 = ln ? d_be1.ptr : nullptr;
            p.out1 = d_o1.ptr;
            p.dtype = t;
            p.kind = kind;
            p.eps = 1e-5f;
            p.n = sh.rows;
            p.hidden = sh.hidden;
            const std::string what = label(n, rank, t, count, std::string(ln ? " layernorm" : " rmsnorm") +
                                                                 " rows " + std::to_string(sh.rows) + " hidden " +
                                                                 std::to_string(sh.hidden));
            const bool eligible = car.add_norm_eligible(p);
            if (!eligible) {
              if (count * es <= kMaxBytes && sh.hidden % 8 == 0) f.add(what + ": not eligible");
              continue;  // every rank decides the same (same shapes), so no call is left unmatched
            }
            // the flag path, then the lamport path (16-bit, <= 128 KiB) on the same inputs: same bits
            car.set_lamport(false);
            car.all_reduce_add_norm(p, s);
            const std::vector<uint8_t> flag_res = download(d_res.ptr, count * 4, s);
            const std::vector<uint8_t> flag0 = download(d_o0.ptr, count * es, s),
                                       flag1 = download(d_o1.ptr, count * es, s);
            car.set_lamport(true);
            const bool lamport = t != DType::F32 && count * es <= (size_t(128) << 10);
            if (car.lamport_eligible(p) != lamport)
              f.add(what + ": lamport_eligible is not " + (lamport ? "true" : "false"));
            up(d_res.ptr, residual.data(), count * 4);
            car.all_reduce_add_norm(p, s);
            const std::vector<uint8_t> got_part = download(d_part.ptr, count * es, s);
            const std::vector<uint8_t> got_res = download(d_res.ptr, count * 4, s);
            const std::vector<uint8_t> got0 = download(d_o0.ptr, count * es, s), got1 = download(d_o1.ptr, count * es, s);
            if (got_res != flag_res || got0 != flag0 || got1 != flag1)
              f.add(what + (lamport ? ": the lamport path" : ": the second call") +
                    " differs from the flag path");
            if (got_part != part) f.add(what + ": the partial sums were modified");
            // reference: the documented all_reduce sum (rounded once to dtype), then add_norm in double
            const std::vector<uint8_t> sum = reference_sum(count, t, n, salt);
            const double atol = t == DType::F32 ? 1e-4 : (t == DType::F16 ? 2e-3 : 1.6e-2);
            const double rtol = t == DType::F32 ? 1e-4 : (t == DType::F16 ? 4e-3 : 1.6e-2);
            int bad = 0;
            std::string first;
            for (int row = 0; row < sh.rows; ++row) {
              std::vector<double> v(sh.hidden);
              double mean = 0, var = 0;
              for (int i = 0; i < sh.hidden; ++i) {
                const size_t e = static_cast<size_t>(row) * sh.hidden + i;
                float x = residual[e];
                x += load(sum, e, t);
                x += load(b0, i, t) + load(b1, i, t);
                v[i] = x;
                float gr;
                std::memcpy(&gr, got_res.data() + 4 * e, 4);
                if (std::fabs(gr - x) > 1e-5 * (1 + std::fabs(x)) && bad++ < 3)
                  first += " residual[" + std::to_string(e) + "] " + std::to_string(gr) + " vs " + std::to_string(x) + ";";
                mean += ln ? x : 0.0;
              }
              mean /= sh.hidden;
              for (double x : v) var += (x - mean) * (x - mean);
              const double rstd = 1.0 / std::sqrt(var / sh.hidden + 1e-5);
              for (int i = 0; i < sh.hidden; ++i) {
                const size_t e = static_cast<size_t>(row) * sh.hidden + i;
                const double y = (v[i] - mean) * rstd;
                const double r0 = y * load(w0, i, t) + (ln ? load(be0, i, t) : 0.0);
                const double r1 = y * load(w1, i, t) + (ln ? load(be1, i, t) : 0.0);
                const double g0 = load(got0, e, t), g1 = load(got1, e, t);
                if (!(std::fabs(g0 - r0) <= atol + rtol * std::fabs(r0)) && bad++ < 3)
                  first += " out0[" + std::to_string(e) + "] " + std::to_string(g0) + " vs " + std::to_string(r0) + ";";
                if (!(std::fabs(g1 - r1) <= atol + rtol * std::fabs(r1)) && bad++ < 3)
                  first += " out1[" + std::to_string(e) + "] " + std::to_string(g1) + " vs " + std::to_string(r1) + ";";
              }
            }
            if (bad) f.add(what + ": " + std::to_string(bad) + " values off:" + first);
          }
        }
      }
    });
    f.report();
  }
}

TEST_CASE(
    "CustomAllReduce::all_reduce_add_norm, lamport path: a CUDA graph of five back-to-back calls of 1-8 "
    "rows replayed 30 times with new data; every call equals the flag path bit for bit") {
  if (!have_peer_gpus(2)) return;
  short_spin_timeout();
  for (int n : rank_counts(/*peers_only=*/false)) {
    if (!all_peers(n)) continue;
    Failures f;
    run_with_car(n, f, [&](int rank, NcclCommunicator& comm, CustomAllReduce& car) {
      cudaStream_t s = comm.stream();
      const DType t = DType::BF16;
      const int hidden = 4096;
      const int rows[] = {1, 2, 1, 8, 3};  // the grid (one block per row) changes between calls
      constexpr int kCalls = 5;
      const size_t es = dtype_size(t);
      std::vector<uint8_t> w(hidden * es);
      for (int i = 0; i < hidden; ++i) store(w, i, t, 0.5f + 0.001f * float(i % 997));
      DeviceMem d_w(hidden * es);
      TPS_CUDA_CHECK(cudaMemcpyAsync(d_w.ptr, w.data(), w.size(), cudaMemcpyHostToDevice, s));
      std::vector<std::unique_ptr<DeviceMem>> part, res, out;
      std::vector<cuda::AddNormParams> params;
      for (int c = 0; c < kCalls; ++c) {
        const size_t count = size_t(rows[c]) * hidden;
        part.push_back(std::make_unique<DeviceMem>(count * es));
        res.push_back(std::make_unique<DeviceMem>(count * 4));
        out.push_back(std::make_unique<DeviceMem>(count * es));
        cuda::AddNormParams p;
        p.residual = static_cast<float*>(res[c]->ptr);
        p.add0 = part[c]->ptr;
        p.weight0 = d_w.ptr;
        p.out0 = out[c]->ptr;
        p.dtype = t;
        p.kind = NormKind::RmsNorm;
        p.eps = 1e-5f;
        p.n = rows[c];
        p.hidden = hidden;
        if (!car.lamport_eligible(p))
          f.add("tp " + std::to_string(n) + ": call " + std::to_string(c) + " is not lamport-eligible");
        params.push_back(p);
      }
      auto upload_inputs = [&](int replay) {
        for (int c = 0; c < kCalls; ++c) {
          const size_t count = size_t(rows[c]) * hidden;
          const auto in = make_input(count, t, rank, 100 * replay + c);
          std::vector<float> r(count);
          for (size_t i = 0; i < count; ++i) r[i] = input_value(i, 31 + c, replay) * 3.0f;
          TPS_CUDA_CHECK(cudaMemcpyAsync(part[c]->ptr, in.data(), in.size(), cudaMemcpyHostToDevice, s));
          TPS_CUDA_CHECK(cudaMemcpyAsync(res[c]->ptr, r.data(), count * 4, cudaMemcpyHostToDevice, s));
        }
      };
      auto results = [&]() {
        std::vector<uint8_t> all;
        for (int c = 0; c < kCalls; ++c) {
          const size_t count = size_t(rows[c]) * hidden;
          for (const auto& v : {download(res[c]->ptr, count * 4, s), download(out[c]->ptr, count * es, s)})
            all.insert(all.end(), v.begin(), v.end());
        }
        return all;
      };
      cudaGraph_t graph = nullptr;
      cudaGraphExec_t exec = nullptr;
      TPS_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
      for (const auto& p : params) car.all_reduce_add_norm(p, s);
      TPS_CUDA_CHECK(cudaStreamEndCapture(s, &graph));
      TPS_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
      for (int k = 0; k < 30; ++k) {
        upload_inputs(k);
        TPS_CUDA_CHECK(cudaGraphLaunch(exec, s));
        const std::vector<uint8_t> got = results();
        upload_inputs(k);
        car.set_lamport(false);
        for (const auto& p : params) car.all_reduce_add_norm(p, s);
        car.set_lamport(true);
        if (results() != got)
          f.add("tp " + std::to_string(n) + " rank " + std::to_string(rank) + " replay " + std::to_string(k) +
                ": the lamport graph differs from the flag path");
        if (k % 7 == 2) {  // eager lamport calls between replays advance the same counters
          upload_inputs(1000 + k);
          for (const auto& p : params) car.all_reduce_add_norm(p, s);
          const std::vector<uint8_t> eager = results();
          upload_inputs(1000 + k);
          car.set_lamport(false);
          for (const auto& p : params) car.all_reduce_add_norm(p, s);
          car.set_lamport(true);
          if (results() != eager)
            f.add("tp " + std::to_string(n) + " rank " + std::to_string(rank) + " eager after replay " +
                  std::to_string(k) + ": lamport differs from the flag path");
        }
      }
      TPS_CUDA_CHECK(cudaGraphExecDestroy(exec));
      TPS_CUDA_CHECK(cudaGraphDestroy(graph));
    });
    INFO("tp " << n);
    f.report();
  }
}
