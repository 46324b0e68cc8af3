// test_rank_groups.cpp: the groups of a dp x pp x tp job (runtime/rank_groups.h) and their meeting over
// TCP: every rank of a world of threads meets all its groups in job_groups order (no deadlock) and each
// group's exchange holds exactly its members.
#include <doctest/doctest.h>

#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "format/error.h"
#include "runtime/host_exchange.h"
#include "runtime/rank_groups.h"
#include "runtime/rendezvous.h"

using namespace tpshard;

TEST_CASE("job_groups: tp groups, stage pairs and the replicas' output ranks of a 2 x 2 x 2 grid") {
  RankGrid g;
  g.dp_size = 2;
  g.pp_size = 2;
  g.tp_size = 2;
  const std::vector<RankGroup> groups = job_groups(g);
  REQUIRE(groups.size() == 11);  // 4 tp groups, 4 stage pairs, the ranks of each of 2 replicas, 1 replica group
  CHECK(groups[0].members == std::vector<int>{0, 1});
  CHECK(groups[3].members == std::vector<int>{6, 7});
  CHECK(groups[4].kind == GroupKind::StagePair);
  CHECK(groups[4].members == std::vector<int>{0, 2});  // dp 0, stages 0-1, tp_rank 0
  CHECK(groups[5].members == std::vector<int>{1, 3});
  CHECK(groups[7].members == std::vector<int>{5, 7});
  CHECK(groups[8].kind == GroupKind::ReplicaRanks);
  CHECK(groups[8].members == std::vector<int>{0, 1, 2, 3});
  CHECK(groups[9].members == std::vector<int>{4, 5, 6, 7});
  CHECK(groups[10].kind == GroupKind::Replicas);
  CHECK(groups[10].members == std::vector<int>{0, 4});
  CHECK(groups[10].index_of(4) == 1);
  CHECK(groups[10].index_of(1) == -1);
  g.tp_size = 1;
  g.dp_size = 1;  // pp 2 alone: one stage pair and the replica's two ranks
  REQUIRE(job_groups(g).size() == 2);
  CHECK(job_groups(g)[0].members == std::vector<int>{0, 1});
  CHECK(job_groups(g)[1].kind == GroupKind::ReplicaRanks);
}

TEST_CASE("meet_group: every rank of a 2 x 2 x 2 world meets its groups; each exchange holds its members") {
  RankGrid g;
  g.dp_size = 2;
  g.pp_size = 2;
  g.tp_size = 2;
  const int world = g.world_size();
  const std::string master = "127.0.0.1:" + std::to_string(find_free_port());
  const std::vector<RankGroup> groups = job_groups(g);
  std::mutex mu;
  std::vector<std::string> failures;
  int checked = 0;
  auto rank_main = [&](int rank) {
    try {
      Rendezvous w(master, rank, world, 30.0);
      const std::vector<std::string> addresses = exchange_group_addresses(w, groups);
      for (size_t i = 0; i < groups.size(); ++i) {
        const RankGroup& group = groups[i];
        if (group.index_of(rank) < 0) continue;
        std::unique_ptr<Rendezvous> meeting = meet_group(group, addresses[i], rank, 30.0);
        RendezvousExchange ex(*meeting);
        const std::vector<std::string> got = ex.all_gather(std::to_string(rank));
        std::vector<std::string> want;
        for (int m : group.members) want.push_back(std::to_string(m));
        std::lock_guard<std::mutex> lock(mu);
        if (got != want) failures.push_back("rank " + std::to_string(rank) + " in " + group.name);
        ++checked;
      }
    } catch (const std::exception& e) {
      std::lock_guard<std::mutex> lock(mu);
      failures.push_back("rank " + std::to_string(rank) + ": " + e.what());
    }
  };
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) threads.emplace_back(rank_main, r);
  for (auto& t : threads) t.join();
  CHECK(failures.empty());
  for (const std::string& f : failures) MESSAGE(f);
  CHECK(checked == 2 * 4 + 2 * 4 + 2 * 4 + 2);  // every member of every group
}
