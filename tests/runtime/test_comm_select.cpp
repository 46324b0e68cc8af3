// test_comm_select.cpp: the host exchanges of runtime/host_exchange.h (thread group, single rank) and the
// communicator choice of runtime/comm_select.h (a pure function of the gathered reports), run in CI.
#include <doctest/doctest.h>

#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "format/error.h"
#include "runtime/comm_select.h"
#include "runtime/host_exchange.h"

using namespace tpshard;

namespace {

/// n ranks on one host, GPUs 0000:0r:00.0, each a peer of every other unless `no_peer` says otherwise.
std::vector<RankCommInfo> one_host(int n) {
  std::vector<RankCommInfo> v(n);
  for (int r = 0; r < n; ++r) {
    v[r].host = "node-a";
    v[r].pci_bus_id = "0000:0" + std::to_string(r) + ":00.0";
  }
  for (int r = 0; r < n; ++r)
    for (int q = 0; q < n; ++q)
      if (q != r) v[r].peer_bus_ids.push_back(v[q].pci_bus_id);
  return v;
}

}  // namespace

TEST_CASE("[cpu] ThreadExchange: all_gather of rank-dependent strings, many rounds, sizes 1..5") {
  for (int n : {1, 2, 3, 5}) {
    auto group = std::make_shared<ThreadExchangeGroup>(n, 30.0);
    std::vector<std::string> errors(n);
    std::vector<std::thread> ts;
    for (int r = 0; r < n; ++r)
      ts.emplace_back([&, r] {
        ThreadExchange ex(group, r);
        for (int round = 0; round < 200; ++round) {
          // lengths differ per rank and round (including empty strings)
          const std::string mine = std::string(size_t((r * 7 + round) % 5), char('a' + r)) + std::to_string(round);
          const auto all = ex.all_gather(mine);
          if (int(all.size()) != n) {
            errors[r] = "size " + std::to_string(all.size());
            return;
          }
          for (int q = 0; q < n; ++q) {
            const std::string want = std::string(size_t((q * 7 + round) % 5), char('a' + q)) + std::to_string(round);
            if (all[q] != want) {
              errors[r] = "round " + std::to_string(round) + " slot " + std::to_string(q) + ": got '" + all[q] +
                          "' want '" + want + "'";
              return;
            }
          }
          const std::string b = ex.broadcast(round % n == r ? "root" + std::to_string(r) : "ignored", round % n);
          if (b != "root" + std::to_string(round % n)) {
            errors[r] = "broadcast round " + std::to_string(round) + ": got '" + b + "'";
            return;
          }
        }
      });
    for (auto& t : ts) t.join();
    for (int r = 0; r < n; ++r) {
      INFO("tp " << n << " rank " << r);
      CHECK(errors[r] == "");
    }
  }
}

TEST_CASE("[cpu] ThreadExchange: abort wakes a waiting rank with an Error; a missing rank times out") {
  {
    auto group = std::make_shared<ThreadExchangeGroup>(2, 30.0);
    std::string caught;
    std::thread waiter([&] {
      ThreadExchange ex(group, 0);
      try {
        ex.all_gather("x");
      } catch (const Error& e) {
        caught = e.what();
      }
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    group->abort("rank 1 failed to load its shard");
    waiter.join();
    CHECK(caught.find("rank 1 failed to load its shard") != std::string::npos);
    ThreadExchange late(group, 1);
    CHECK_THROWS_AS(late.all_gather("y"), Error);  // the group stays failed
  }
  {
    auto group = std::make_shared<ThreadExchangeGroup>(2, 0.2);
    ThreadExchange ex(group, 0);
    try {
      ex.all_gather("alone");
      FAIL("all_gather without the peer returned");
    } catch (const Error& e) {
      CHECK(std::string(e.what()).find("waited") != std::string::npos);
    }
  }
  CHECK_THROWS_AS(ThreadExchangeGroup(0), Error);
  CHECK_THROWS_AS(ThreadExchange(std::make_shared<ThreadExchangeGroup>(2), 2), Error);
}

TEST_CASE("[cpu] SingleExchange returns its own blob") {
  SingleExchange ex;
  CHECK(ex.size() == 1);
  CHECK(ex.all_gather("me") == std::vector<std::string>{"me"});
  CHECK(ex.broadcast("id") == "id");
}

TEST_CASE("[cpu] choose_comm: local for 1 rank, peer on one host with all pairs peers, else NCCL with a reason") {
  CHECK(choose_comm(one_host(1)).kind == CommKind::CommKind_Local);
  for (int n : {2, 3, 4, 8}) {
    const CommChoice c = choose_comm(one_host(n));
    INFO("tp " << n << ": " << c.reason);
    CHECK(c.kind == CommKind::CommKind_Peer);
    CHECK(c.reason == "");
    CHECK_FALSE(c.forced);
  }
  {  // 9 ranks: beyond the peer communicator
    const CommChoice c = choose_comm(one_host(9));
    CHECK(c.kind == CommKind::CommKind_Nccl);
    CHECK(c.reason.find("tp_size 9") != std::string::npos);
  }
  {  // two hosts
    auto v = one_host(4);
    v[2].host = "node-b";
    v[3].host = "node-b";
    const CommChoice c = choose_comm(v);
    CHECK(c.kind == CommKind::CommKind_Nccl);
    CHECK(c.reason == "ranks on different hosts (rank 0 on node-a, rank 2 on node-b)");
    CHECK_FALSE(c.forced);
  }
  {  // one missing peer link (PCIe-only pair): one direction is enough to refuse
    auto v = one_host(3);
    v[2].peer_bus_ids = {v[0].pci_bus_id};
    const CommChoice c = choose_comm(v);
    CHECK(c.kind == CommKind::CommKind_Nccl);
    CHECK(c.reason == "no peer access from rank 2's GPU (0000:02:00.0) to rank 1's GPU (0000:01:00.0)");
  }
  {  // two ranks on one GPU need no peer access
    auto v = one_host(2);
    v[1].pci_bus_id = v[0].pci_bus_id;
    v[0].peer_bus_ids.clear();
    v[1].peer_bus_ids.clear();
    CHECK(choose_comm(v).kind == CommKind::CommKind_Peer);
  }
  CHECK_THROWS_AS(choose_comm({}), Error);
}

TEST_CASE("[cpu] choose_comm: TPSHARD_COMM=nccl on any rank forces NCCL (also tp 1); NO_CUSTOM only for tp > 1") {
  for (int n : {1, 2, 4}) {
    auto v = one_host(n);
    v[n - 1].force_nccl = true;
    const CommChoice c = choose_comm(v);
    CHECK(c.kind == CommKind::CommKind_Nccl);
    CHECK(c.forced);
    CHECK(c.reason == "TPSHARD_COMM=nccl set on rank " + std::to_string(n - 1));
  }
  auto one = one_host(1);
  one[0].no_peer_kernels = true;
  CHECK(choose_comm(one).kind == CommKind::CommKind_Local);
  auto two = one_host(2);
  two[0].no_peer_kernels = true;
  const CommChoice c = choose_comm(two);
  CHECK(c.kind == CommKind::CommKind_Nccl);
  CHECK(c.forced);
  CHECK(c.reason == "TPSHARD_NO_CUSTOM_ALL_REDUCE set on rank 0");
}

TEST_CASE("[cpu] RankCommInfo wire form round-trips; malformed reports are refused naming the rank") {
  RankCommInfo a;
  a.host = "gpu-node-17";
  a.pci_bus_id = "0000:1B:00.0";
  a.peer_bus_ids = {"0000:43:00.0", "0000:52:00.0"};
  a.force_nccl = true;
  const RankCommInfo b = decode_rank_comm_info(encode_rank_comm_info(a), 3);
  CHECK(b.host == a.host);
  CHECK(b.pci_bus_id == a.pci_bus_id);
  CHECK(b.peer_bus_ids == a.peer_bus_ids);
  CHECK(b.force_nccl);
  CHECK_FALSE(b.no_peer_kernels);
  RankCommInfo empty;
  const RankCommInfo e = decode_rank_comm_info(encode_rank_comm_info(empty), 0);
  CHECK(e.host == "");
  CHECK(e.peer_bus_ids.empty());
  try {
    decode_rank_comm_info("garbage", 5);
    FAIL("decoded garbage");
  } catch (const Error& err) {
    CHECK(std::string(err.what()).find("rank 5") != std::string::npos);
  }
  CHECK_THROWS_AS(decode_rank_comm_info("tpshard-comm-info 1\nh\nb\n2x\n", 1), Error);
}
