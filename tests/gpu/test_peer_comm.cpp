// test_peer_comm.cpp: the NCCL-free communicators (runtime/cuda/peer_comm.h, local_comm.h) and the choice
// between them (make_device_comm.h), ranks as threads of this process with a ThreadExchange, one GPU each
// (2 GPUs; also 3, 4 and all GPUs when present and peers). Every result is compared bit for bit with a
// host reference (fp32 rank-order sum rounded once; exact bytes for gathers and broadcasts), inputs
// depend on the rank, and a mismatch prints the first differing elements with both values.
#include <cuda_runtime.h>
#include <doctest/doctest.h>

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
#include "runtime/cuda/local_comm.h"
#include "runtime/cuda/make_device_comm.h"
#include "runtime/cuda/peer_comm.h"
#include "runtime/host_exchange.h"

using namespace tpshard;
using namespace tpshard::test;
using tpshard::cuda::DeviceCommunicator;
using tpshard::cuda::PeerCommunicator;

namespace {

/// Small staging (64 KiB) so that the "chunked" sizes below take many kernels per call.
constexpr size_t kSmallStaging = size_t(64) << 10;

bool have_peer_gpus() {
  if (rank_counts(/*peers_only=*/true).empty()) {
    MESSAGE("skipped: the peer communicator tests need 2 GPUs that are CUDA peers");
    return false;
  }
  return true;
}

/// Runs fn(rank, comm) on n threads (rank r on GPU r, a PeerCommunicator with `staging` bytes each);
/// rethrows the first error. A missing communicator is a failure.
void run_peer(int n, size_t staging, Failures& f, const std::function<void(int, PeerCommunicator&)>& fn) {
  auto group = std::make_shared<ThreadExchangeGroup>(n, 60.0);
  std::vector<std::exception_ptr> errors(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        TPS_CUDA_CHECK(cudaSetDevice(r));
        ThreadExchange ex(group, r);
        std::string why;
        auto comm = PeerCommunicator::try_create(ex, 60.0, &why, staging);
        if (!comm) {
          f.add("tp " + std::to_string(n) + " rank " + std::to_string(r) + ": try_create: " + why);
          return;
        }
        fn(r, *comm);
        comm->barrier();
      } catch (...) {
        errors[r] = std::current_exception();
        group->abort("rank " + std::to_string(r) + " threw");
      }
    });
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

// ---- host data and references ----

/// Bytes of rank r's all_gather / broadcast contribution.
std::vector<uint8_t> rank_bytes(size_t bytes, int rank, int salt) {
  std::vector<uint8_t> v(bytes);
  for (size_t i = 0; i < bytes; ++i) v[i] = uint8_t((i * 131 + size_t(rank) * 71 + size_t(salt) * 17 + i / 251) & 0xff);
  return v;
}

/// "" when equal, else the count and the first mismatches (element values for dtypes, bytes otherwise).
std::string compare(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want, int elem_bytes, DType t,
                    const std::string& what) {
  if (got.size() != want.size())
    return what + ": size " + std::to_string(got.size()) + " != " + std::to_string(want.size());
  if (std::memcmp(got.data(), want.data(), got.size()) == 0) return "";
  const size_t n = got.size() / size_t(elem_bytes);
  size_t bad = 0;
  std::string first;
  for (size_t i = 0; i < n; ++i)
    if (std::memcmp(got.data() + i * elem_bytes, want.data() + i * elem_bytes, size_t(elem_bytes)) != 0) {
      if (bad < 4) {
        if (elem_bytes == 1)
          first += " [" + std::to_string(i) + "] got " + std::to_string(got[i]) + " want " + std::to_string(want[i]) + ";";
        else
          first += " [" + std::to_string(i) + "] got " + std::to_string(load(got, i, t)) + " want " +
                   std::to_string(load(want, i, t)) + ";";
      }
      ++bad;
    }
  return what + ": " + std::to_string(bad) + " of " + std::to_string(n) + " elements differ:" + first;
}

std::string label(int n, int rank, const std::string& what) {
  return "tp " + std::to_string(n) + " rank " + std::to_string(rank) + " " + what;
}

const DType kDTypes[] = {DType::F32, DType::F16, DType::BF16};

/// One all_reduce call of the mixed sequences: input at buf (offset `misalign` bytes into its allocation).
struct ArCall {
  DType t;
  size_t count;
  size_t misalign;
  int salt;
};

/// Enqueue upload + all_reduce of c on `comm` into mem (allocated by the caller, >= misalign + bytes).
void enqueue_all_reduce(DeviceCommunicator& comm, const ArCall& c, int rank, DeviceMem& mem) {
  upload(mem.at(c.misalign), make_input(c.count, c.t, rank, c.salt), comm.stream());
  comm.all_reduce_sum(mem.at(c.misalign), c.count, c.t);
}

std::string check_all_reduce(DeviceCommunicator& comm, const ArCall& c, int n, int rank, DeviceMem& mem,
                             const std::string& extra) {
  const size_t bytes = c.count * dtype_size(c.t);
  return compare(download(mem.at(c.misalign), bytes, comm.stream()), reference_sum(c.count, c.t, n, c.salt),
                 int(dtype_size(c.t)), c.t,
                 label(n, rank, std::string(dtype_name(c.t)) + " count " + std::to_string(c.count) + " offset " +
                                    std::to_string(c.misalign) + extra));
}

}  // namespace

TEST_CASE("PeerCommunicator: all_reduce_sum is bit-exact for 1, 7, 1000 elements and 3 MiB (chunked), all dtypes, "
          "aligned and misaligned buffers") {
  if (!have_peer_gpus()) return;
  short_spin_timeout();
  for (int n : rank_counts(/*peers_only=*/true)) {
    for (size_t staging : {PeerCommunicator::kDefaultStagingBytes, kSmallStaging}) {
      Failures f;
      run_peer(n, staging, f, [&](int rank, PeerCommunicator& comm) {
        if (comm.rank() != rank || comm.size() != n || std::string(comm.name()) != "peer")
          f.add(label(n, rank, "rank()/size()/name() wrong"));
        int salt = 0;
        for (DType t : kDTypes) {
          const size_t e = dtype_size(t);
          for (size_t count : {size_t(1), size_t(7), size_t(1000), size_t(3u << 20) / e, size_t(3u << 20) / e + 3}) {
            // offset 0: 16-byte aligned (one-shot kernel when it fits, else chunked vector path);
            // offset e: aligned to the element only (element-by-element path)
            for (size_t misalign : {size_t(0), e}) {
              const ArCall c{t, count, misalign, ++salt};
              DeviceMem mem(misalign + count * e);
              enqueue_all_reduce(comm, c, rank, mem);
              const std::string bad = check_all_reduce(comm, c, n, rank, mem, " staging " + std::to_string(staging));
              if (!bad.empty()) f.add(bad);
            }
          }
        }
      });
      INFO("tp " << n << " staging " << staging);
      f.report();
    }
  }
}

TEST_CASE("PeerCommunicator: all_gather of 8 bytes, odd sizes, misaligned buffers, in place and 5 MB (chunked)") {
  if (!have_peer_gpus()) return;
  short_spin_timeout();
  for (int n : rank_counts(/*peers_only=*/true)) {
    Failures f;
    run_peer(n, kSmallStaging, f, [&](int rank, PeerCommunicator& comm) {
      cudaStream_t s = comm.stream();
      int salt = 0;
      // count of dtype per rank, send offset, recv offset (bytes); F32 x 2 = one argmax pair at batch 1
      struct Case { DType t; size_t count, send_off, recv_off; };
      for (const Case& c : {Case{DType::F32, 2, 0, 0}, Case{DType::F16, 1, 0, 0}, Case{DType::F16, 13, 6, 2},
                            Case{DType::BF16, 1001, 0, 4}, Case{DType::F32, 1000, 16, 8},
                            Case{DType::F16, 2500001, 0, 0}, Case{DType::F32, 1250000, 4, 0}}) {
        ++salt;
        const size_t bytes = c.count * dtype_size(c.t);
        const auto mine = rank_bytes(bytes, rank, salt);
        DeviceMem send(c.send_off + bytes), recv(c.recv_off + bytes * n);
        upload(send.at(c.send_off), mine, s);
        comm.all_gather(send.at(c.send_off), recv.at(c.recv_off), c.count, c.t);
        std::vector<uint8_t> want;
        for (int q = 0; q < n; ++q) {
          const auto part = rank_bytes(bytes, q, salt);
          want.insert(want.end(), part.begin(), part.end());
        }
        const std::string bad = compare(download(recv.at(c.recv_off), bytes * n, s), want, 1, c.t,
                                        label(n, rank, "all_gather " + std::to_string(c.count) + " x " +
                                                           dtype_name(c.t) + " send+" + std::to_string(c.send_off) +
                                                           " recv+" + std::to_string(c.recv_off)));
        if (!bad.empty()) f.add(bad);
      }
      // in place: send is this rank's part of recv (as NCCL allows)
      const size_t bytes = 200000 * 4;
      DeviceMem recv(bytes * n);
      upload(recv.at(bytes * rank), rank_bytes(bytes, rank, 99), s);
      comm.all_gather(recv.at(bytes * rank), recv.ptr, bytes / 4, DType::F32);
      std::vector<uint8_t> want;
      for (int q = 0; q < n; ++q) {
        const auto part = rank_bytes(bytes, q, 99);
        want.insert(want.end(), part.begin(), part.end());
      }
      const std::string bad = compare(download(recv.ptr, bytes * n, s), want, 1, DType::F32,
                                      label(n, rank, "all_gather in place"));
      if (!bad.empty()) f.add(bad);
    });
    INFO("tp " << n);
    f.report();
  }
}

TEST_CASE("PeerCommunicator: broadcast from every root (odd byte counts, chunked), all_gather_host, barrier") {
  if (!have_peer_gpus()) return;
  short_spin_timeout();
  for (int n : rank_counts(/*peers_only=*/true)) {
    Failures f;
    run_peer(n, kSmallStaging, f, [&](int rank, PeerCommunicator& comm) {
      cudaStream_t s = comm.stream();
      for (int root = 0; root < n; ++root) {
        for (size_t bytes : {size_t(1), size_t(8), size_t(777), size_t(300001)}) {
          const int salt = int(bytes % 1000) + 10 * root;
          DeviceMem buf(bytes + 3);
          // every rank starts with its own bytes; after the call all hold root's
          upload(buf.at(3), rank_bytes(bytes, rank, salt), s);
          comm.broadcast(buf.at(3), bytes, root);
          const std::string bad =
              compare(download(buf.at(3), bytes, s), rank_bytes(bytes, root, salt), 1, DType::F32,
                      label(n, rank, "broadcast of " + std::to_string(bytes) + " bytes from root " + std::to_string(root)));
          if (!bad.empty()) f.add(bad);
        }
      }
      for (size_t bytes : {size_t(3), size_t(64), size_t(100003)}) {
        const auto mine = rank_bytes(bytes, rank, 5);
        const auto all = comm.all_gather_host(mine.data(), bytes);
        std::vector<uint8_t> want;
        for (int q = 0; q < n; ++q) {
          const auto part = rank_bytes(bytes, q, 5);
          want.insert(want.end(), part.begin(), part.end());
        }
        const std::string bad =
            compare(all, want, 1, DType::F32, label(n, rank, "all_gather_host of " + std::to_string(bytes) + " bytes"));
        if (!bad.empty()) f.add(bad);
      }
      // barrier: rank r writes a host flag before it; after it every rank sees all flags
      static std::mutex mu;
      static std::vector<int> arrived;
      {
        std::lock_guard<std::mutex> lock(mu);
        if (arrived.size() != size_t(n)) arrived.assign(size_t(n), 0);
      }
      comm.barrier();  // everybody has sized `arrived` before anybody writes it
      for (int k = 1; k <= 20; ++k) {
        {
          std::lock_guard<std::mutex> lock(mu);
          arrived[size_t(rank)] = k;
        }
        comm.barrier();
        std::lock_guard<std::mutex> lock(mu);
        for (int q = 0; q < n; ++q)
          if (arrived[size_t(q)] < k)
            f.add(label(n, rank, "barrier " + std::to_string(k) + " returned before rank " + std::to_string(q) +
                                     " arrived (it is at " + std::to_string(arrived[size_t(q)]) + ")"));
      }
      comm.barrier();  // nobody resizes `arrived` for the next tp while a peer still reads it
    });
    INFO("tp " << n);
    f.report();
  }
}

TEST_CASE("PeerCommunicator: 200 interleaved all_reduce / all_gather calls without host sync, then in a CUDA graph "
          "replayed 50 times") {
  if (!have_peer_gpus()) return;
  short_spin_timeout();
  for (int n : rank_counts(/*peers_only=*/true)) {
    Failures f;
    run_peer(n, kSmallStaging, f, [&](int rank, PeerCommunicator& comm) {
      cudaStream_t s = comm.stream();
      // A call list mixing the one-shot kernel (small aligned), the chunked vector path (> staging), the
      // element path (odd count / misaligned) and gathers of changing sizes.
      struct Call {
        bool gather;
        ArCall ar;
        size_t gather_count;  ///< f32 per rank
        std::unique_ptr<DeviceMem> a, b;
      };
      const size_t counts[] = {8, 4096, 50000, 7, 1001};
      std::vector<Call> calls;
      for (int k = 0; k < 200; ++k) {
        Call c;
        c.gather = k % 4 == 3;
        c.ar = ArCall{kDTypes[k % 3], counts[(k / 3) % 5], (k % 7 == 5) ? dtype_size(kDTypes[k % 3]) : 0, 2000 + k};
        c.gather_count = 2 + size_t(k % 5) * 3001;
        if (c.gather) {
          c.a = std::make_unique<DeviceMem>(c.gather_count * 4);
          c.b = std::make_unique<DeviceMem>(c.gather_count * 4 * n);
          upload(c.a->ptr, rank_bytes(c.gather_count * 4, rank, k), s);
        } else {
          c.a = std::make_unique<DeviceMem>(c.ar.misalign + c.ar.count * dtype_size(c.ar.t));
          upload(c.a->at(c.ar.misalign), make_input(c.ar.count, c.ar.t, rank, c.ar.salt), s);
        }
        calls.push_back(std::move(c));
      }
      auto enqueue_all = [&] {
        for (auto& c : calls) {
          if (c.gather)
            comm.all_gather(c.a->ptr, c.b->ptr, c.gather_count, DType::F32);
          else
            comm.all_reduce_sum(c.a->at(c.ar.misalign), c.ar.count, c.ar.t);
        }
      };
      auto check_all = [&](const std::string& when) {
        for (size_t k = 0; k < calls.size(); ++k) {
          const Call& c = calls[k];
          std::string bad;
          if (c.gather) {
            std::vector<uint8_t> want;
            for (int q = 0; q < n; ++q) {
              const auto part = rank_bytes(c.gather_count * 4, q, int(k));
              want.insert(want.end(), part.begin(), part.end());
            }
            bad = compare(download(c.b->ptr, want.size(), s), want, 1, DType::F32,
                          label(n, rank, "call " + std::to_string(k) + " all_gather" + when));
          } else {
            bad = check_all_reduce(comm, c.ar, n, rank, *c.a, " call " + std::to_string(k) + when);
          }
          if (!bad.empty()) f.add(bad);
        }
      };
      auto reupload = [&] {  // all_reduce is in place: restore the inputs
        for (auto& c : calls)
          if (!c.gather) upload(c.a->at(c.ar.misalign), make_input(c.ar.count, c.ar.t, rank, c.ar.salt), s);
      };
      enqueue_all();
      check_all(" (eager)");
      cudaGraph_t graph = nullptr;
      cudaGraphExec_t exec = nullptr;
      TPS_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
      enqueue_all();
      TPS_CUDA_CHECK(cudaStreamEndCapture(s, &graph));
      TPS_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
      for (int replay = 0; replay < 50; ++replay) {
        reupload();
        TPS_CUDA_CHECK(cudaGraphLaunch(exec, s));
        if (replay % 10 == 9) {  // an eager call between replays advances the same counters
          const ArCall extra{DType::BF16, 4096 * 3, 0, 7000 + replay};
          DeviceMem mem(extra.count * 2);
          enqueue_all_reduce(comm, extra, rank, mem);
          const std::string bad = check_all_reduce(comm, extra, n, rank, mem, " eager after replay");
          if (!bad.empty()) f.add(bad);
        }
        if (replay % 10 == 0 || replay == 49) check_all(" (graph replay " + std::to_string(replay) + ")");
      }
      TPS_CUDA_CHECK(cudaStreamSynchronize(s));
      TPS_CUDA_CHECK(cudaGraphExecDestroy(exec));
      TPS_CUDA_CHECK(cudaGraphDestroy(graph));
    });
    INFO("tp " << n);
    f.report();
  }
}

TEST_CASE("PeerCommunicator: bits equal NCCL's at tp 2 for a 12 MiB prefill-sized bf16 all_reduce") {
  if (!have_peer_gpus()) return;
  short_spin_timeout();
  // NCCL's sum of two values is the correctly rounded a + b, as ours; compare through make_device_comm
  // with TPSHARD_COMM=nccl on the same inputs.
  const size_t count = (size_t(12) << 20) / 2;
  std::vector<std::vector<uint8_t>> results(2);
  for (const char* mode : {"auto", "nccl"}) {
    cuda::DeviceCommOptions co;  // what TPSHARD_COMM sets in a tprun job
    co.force_nccl = std::string(mode) == "nccl";
    auto group = std::make_shared<ThreadExchangeGroup>(2, 60.0);
    std::vector<std::exception_ptr> errors(2);
    std::vector<std::string> names(2);
    std::vector<std::thread> threads;
    for (int r = 0; r < 2; ++r)
      threads.emplace_back([&, r] {
        try {
          TPS_CUDA_CHECK(cudaSetDevice(r));
          ThreadExchange ex(group, r);
          auto comm = cuda::make_device_comm(ex, co);
          names[size_t(r)] = comm->name();
          DeviceMem mem(count * 2);
          upload(mem.ptr, make_input(count, DType::BF16, r, 4242), comm->stream());
          comm->all_reduce_sum(mem.ptr, count, DType::BF16);
          auto got = download(mem.ptr, count * 2, comm->stream());
          if (std::string(mode) == "nccl" && r == 0) results[1] = got;
          if (std::string(mode) == "auto" && r == 0) results[0] = got;
          comm->barrier();
        } catch (...) {
          errors[size_t(r)] = std::current_exception();
          group->abort("rank " + std::to_string(r) + " threw");
        }
      });
    for (auto& t : threads) t.join();
    for (auto& e : errors)
      if (e) std::rethrow_exception(e);
    CHECK(names[0] == std::string(std::string(mode) == "nccl" ? "nccl" : "peer"));
    CHECK(names[1] == names[0]);
  }
  CHECK(compare(results[0], reference_sum(count, DType::BF16, 2, 4242), 2, DType::BF16, "peer vs host") == "");
  CHECK(compare(results[0], results[1], 2, DType::BF16, "peer vs NCCL") == "");
}

TEST_CASE("LocalCommunicator: all_reduce and broadcast leave data alone, all_gather copies, barrier waits") {
  TPS_CUDA_CHECK(cudaSetDevice(0));
  cuda::LocalCommunicator comm(30.0);
  CHECK(comm.rank() == 0);
  CHECK(comm.size() == 1);
  CHECK(std::string(comm.name()) == "local");
  const size_t count = 1001;
  const auto in = make_input(count, DType::F16, 0, 3);
  DeviceMem a(count * 2), b(count * 2);
  upload(a.ptr, in, comm.stream());
  comm.all_reduce_sum(a.ptr, count, DType::F16);
  comm.broadcast(a.ptr, count * 2, 0);
  comm.all_gather(a.ptr, b.ptr, count, DType::F16);
  comm.all_gather(a.ptr, a.ptr, count, DType::F16);  // in place: nothing to do
  comm.barrier();
  CHECK(compare(download(a.ptr, count * 2, comm.stream()), in, 2, DType::F16, "all_reduce/broadcast input") == "");
  CHECK(compare(download(b.ptr, count * 2, comm.stream()), in, 2, DType::F16, "all_gather output") == "");
  const double x[2] = {1.5, -2.25};
  const auto host = comm.all_gather_host(x, sizeof(x));
  REQUIRE(host.size() == sizeof(x));
  CHECK(std::memcmp(host.data(), x, sizeof(x)) == 0);
  CHECK_THROWS_AS(comm.broadcast(a.ptr, 4, 1), Error);
  comm.abort();
  CHECK_THROWS_AS(comm.all_reduce_sum(a.ptr, 4, DType::F32), Error);
}

TEST_CASE("make_device_comm: local for 1 rank, peer for 2 peer GPUs, NCCL when TPSHARD_COMM=nccl") {
  TPS_CUDA_CHECK(cudaSetDevice(0));
  {
    SingleExchange one;
    CommChoice c;
    auto comm = cuda::make_device_comm(one, {}, &c);
    CHECK(std::string(comm->name()) == "local");
    CHECK(c.kind == CommKind::CommKind_Local);
  }
  {
    cuda::DeviceCommOptions nccl_opts;  // TPSHARD_COMM=nccl
    nccl_opts.force_nccl = true;
    SingleExchange one;
    auto comm = cuda::make_device_comm(one, nccl_opts);
    CHECK(std::string(comm->name()) == "nccl");
    comm->barrier();
  }
  if (!have_peer_gpus()) return;
  short_spin_timeout();
  for (const char* mode : {"", "nccl"}) {
    cuda::DeviceCommOptions co;  // TPSHARD_COMM=nccl for "nccl"
    co.force_nccl = *mode != 0;
    auto group = std::make_shared<ThreadExchangeGroup>(2, 60.0);
    std::vector<std::string> names(2), reasons(2);
    std::vector<std::exception_ptr> errors(2);
    std::vector<std::thread> threads;
    for (int r = 0; r < 2; ++r)
      threads.emplace_back([&, r] {
        try {
          TPS_CUDA_CHECK(cudaSetDevice(r));
          ThreadExchange ex(group, r);
          CommChoice c;
          auto comm = cuda::make_device_comm(ex, co, &c);
          names[size_t(r)] = comm->name();
          reasons[size_t(r)] = c.reason;
          comm->barrier();
        } catch (...) {
          errors[size_t(r)] = std::current_exception();
          group->abort("rank " + std::to_string(r) + " threw");
        }
      });
    for (auto& t : threads) t.join();
    for (auto& e : errors)
      if (e) std::rethrow_exception(e);
    INFO("TPSHARD_COMM='" << mode << "', reason: " << reasons[0]);
    CHECK(names[0] == std::string(*mode ? "nccl" : "peer"));
    CHECK(names[1] == names[0]);
  }
}
