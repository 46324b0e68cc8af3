// check_lookahead.cpp: see check_lookahead.h.
#include "tools/bench_generate/check_lookahead.h"

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "runtime/cuda/cuda_runner.h"

namespace tpshard {
namespace {

/// Everything a run returned, in call order, and the runner's lookahead counters.
struct Trace {
  std::vector<int32_t> ids;
  std::vector<float> logits;
  cuda::LookaheadStats stats;
};

/// The scripted session: 4 prompts, 40 decode steps with the events listed in check_lookahead.h.
Trace drive(const Manifest& m, int rank, int tp_size, const cuda::WeightArena& arena, Communicator& comm,
            bool lookahead) {
  cuda::CudaRunnerOptions o;
  o.max_batch = 4;
  o.max_seq_len = 64;
  o.lookahead = lookahead;
  auto runner = cuda::make_cuda_runner(m, rank, tp_size, arena, comm, o);
  const int32_t vocab = static_cast<int32_t>(m.model.vocab_size);
  std::mt19937 rng(77);
  auto prompt = [&](int len) {
    std::vector<int32_t> p(len);
    for (auto& t : p) t = static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab));
    return p;
  };
  Trace tr;
  std::vector<int> slots = {0, 1, 2, 3}, pos(4), tok(4);
  std::vector<SeqChunk> pre;
  const int lens[4] = {5, 9, 3, 12};
  for (int s = 0; s < 4; ++s) pre.push_back({s, 0, prompt(lens[s])});
  std::vector<int32_t> ids(4);
  runner->forward(pre, nullptr, ids.data());
  for (int s = 0; s < 4; ++s) {
    pos[s] = lens[s];
    tok[s] = ids[s];
    tr.ids.push_back(ids[s]);
  }
  for (int step = 0; step < 40; ++step) {
    if (step == 12) slots.erase(std::find(slots.begin(), slots.end(), 2));  // row 2 finished: subset
    if (step == 16) {                                                       // slot 2 reused: prefill between steps
      std::vector<SeqChunk> p = {{2, 0, prompt(6)}};
      int32_t first = 0;
      runner->forward(p, nullptr, &first);
      tr.ids.push_back(first);
      pos[2] = 6;
      tok[2] = first;
      slots.insert(slots.begin() + 2, 2);
    }
    if (step == 25) slots.erase(std::find(slots.begin(), slots.end(), 3));  // marked last_step at 24
    if (step == 8) tok[0] = (tok[0] + 1) % vocab;                         // not the argmax: mismatch
    std::vector<SeqChunk> chunks;
    for (int s : slots) {
      SeqChunk c{s, pos[s], {tok[s]}};
      c.last_step = s == 3 && step == 24;
      chunks.push_back(c);
    }
    const bool want_logits = step == 20;
    std::vector<float> logits(want_logits ? chunks.size() * static_cast<size_t>(vocab) : 0);
    ids.assign(chunks.size(), -1);
    runner->forward(chunks, want_logits ? logits.data() : nullptr, ids.data());
    tr.logits.insert(tr.logits.end(), logits.begin(), logits.end());
    for (size_t i = 0; i < chunks.size(); ++i) {
      tr.ids.push_back(ids[i]);
      tok[chunks[i].slot] = ids[i];
      ++pos[chunks[i].slot];
    }
  }
  tr.stats = cuda::lookahead_stats(*runner);
  return tr;
}

}  // namespace

int check_lookahead(const Manifest& m, int rank, int tp_size, const cuda::WeightArena& arena, Communicator& comm,
                    const std::function<void(const std::string&)>& say) {
  const Trace off = drive(m, rank, tp_size, arena, comm, false);
  const Trace on = drive(m, rank, tp_size, arena, comm, true);
  int fails = 0;
  size_t first_diff = 0;
  while (first_diff < std::min(off.ids.size(), on.ids.size()) && off.ids[first_diff] == on.ids[first_diff]) ++first_diff;
  const bool ids_same = off.ids.size() == on.ids.size() && first_diff == off.ids.size();
  fails += !ids_same;
  say(std::string(ids_same ? "PASS" : "FAIL") + " lookahead: " + std::to_string(on.ids.size()) +
      " greedy ids identical with and without it" +
      (ids_same ? "" : " (first difference at id " + std::to_string(first_diff) + ")"));
  const bool logits_same = off.logits == on.logits && !on.logits.empty();
  fails += !logits_same;
  say(std::string(logits_same ? "PASS" : "FAIL") + " lookahead: the logits step is bitwise identical");
  // 40 decode steps; the script's events break the chain a few times, so most steps must come from it.
  const bool used = on.stats.ahead_used >= 25 && off.stats.ahead_used == 0;
  fails += !used;
  say(std::string(used ? "PASS" : "FAIL") + " lookahead: " + std::to_string(on.stats.ahead_used) + " of " +
      std::to_string(on.stats.decode_steps) + " decode steps computed ahead (without it: " +
      std::to_string(off.stats.ahead_used) + ")");
  return fails;
}

}  // namespace tpshard
