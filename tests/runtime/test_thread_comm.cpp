// test_thread_comm.cpp: the CPU backend's ThreadComm with rank-dependent inputs (nccl-tests style),
// and abort: a failing rank must wake ranks blocked in a collective.
#include <doctest/doctest.h>

#include <atomic>
#include <functional>
#include <thread>
#include <vector>

#include "format/error.h"
#include "runtime/cpu/thread_comm.h"

using namespace tpshard;

namespace {
void run_group(int n, const std::function<void(ThreadComm&)>& fn) {
  auto group = std::make_shared<ThreadGroup>(n);
  std::vector<std::thread> ts;
  for (int r = 0; r < n; ++r)
    ts.emplace_back([&, r] {
      ThreadComm comm(group, r);
      fn(comm);
    });
  for (auto& t : ts) t.join();
}
}  // namespace

TEST_CASE("thread comm all_reduce_sum with rank-dependent inputs") {
  for (int n : {1, 2, 3, 4}) {
    std::vector<std::vector<float>> out(n);
    run_group(n, [&](ThreadComm& c) {
      std::vector<float> buf(37);
      for (size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<float>((c.rank() + 1) * 100 + i);
      for (int rep = 0; rep < 3; ++rep) {  // repeated calls reuse the same slots
        std::vector<float> b = buf;
        c.all_reduce_sum(b.data(), b.size(), DType::F32);
        if (rep == 2) out[c.rank()] = b;
      }
    });
    // sum over r of (r+1)*100 + i = 100 * n(n+1)/2 + n*i
    for (int r = 0; r < n; ++r)
      for (size_t i = 0; i < 37; ++i) CHECK(out[r][i] == doctest::Approx(100.0 * n * (n + 1) / 2 + n * i));
  }
}

TEST_CASE("thread comm all_reduce_sum bf16") {
  std::vector<std::vector<uint16_t>> out(2);
  run_group(2, [&](ThreadComm& c) {
    std::vector<uint16_t> b = {f32_to_bf16(1.5f + c.rank()), f32_to_bf16(-2.0f * (c.rank() + 1))};
    c.all_reduce_sum(b.data(), b.size(), DType::BF16);
    out[c.rank()] = b;
  });
  for (int r = 0; r < 2; ++r) {
    CHECK(bf16_to_f32(out[r][0]) == 4.0f);   // 1.5 + 2.5
    CHECK(bf16_to_f32(out[r][1]) == -6.0f);  // -2 + -4
  }
}

TEST_CASE("thread comm all_gather, broadcast, barrier") {
  const int n = 4;
  std::vector<std::vector<int32_t>> gathered(n), bcast(n);
  run_group(n, [&](ThreadComm& c) {
    std::vector<int32_t> send = {c.rank() * 10, c.rank() * 10 + 1, c.rank() * 10 + 2};
    std::vector<int32_t> recv(n * 3, -1);
    c.all_gather(send.data(), recv.data(), 3, DType::F32);  // 4-byte elements, copied bitwise
    gathered[c.rank()] = recv;
    std::vector<int32_t> b = {c.rank() == 2 ? 77 : c.rank(), c.rank() == 2 ? 88 : -c.rank()};
    c.broadcast(b.data(), b.size() * sizeof(int32_t), 2);
    bcast[c.rank()] = b;
    c.barrier();
  });
  for (int r = 0; r < n; ++r) {
    for (int s = 0; s < n; ++s)
      for (int i = 0; i < 3; ++i) CHECK(gathered[r][s * 3 + i] == s * 10 + i);
    CHECK(bcast[r] == std::vector<int32_t>{77, 88});
  }
}

TEST_CASE("thread comm abort wakes ranks waiting in a collective") {
  auto group = std::make_shared<ThreadGroup>(3);
  std::atomic<int> woke{0};
  std::vector<std::thread> ts;
  for (int r = 1; r < 3; ++r)
    ts.emplace_back([&, r] {
      ThreadComm comm(group, r);
      float x = 1.0f;
      try {
        comm.all_reduce_sum(&x, 1, DType::F32);  // rank 0 never joins
      } catch (const Error&) {
        ++woke;
      }
    });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  group->abort("rank 0 failed");
  for (auto& t : ts) t.join();
  CHECK(woke == 2);
  ThreadComm c0(group, 0);
  CHECK_THROWS_AS(c0.barrier(), Error);
}
