// check_shared_prefix.cpp: see check_shared_prefix.h.
#include "tools/bench_generate/check_shared_prefix.h"

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

namespace tpshard {

int check_shared_prefix(const Manifest& m, int rank, int tp_size, const cuda::WeightArena& arena, Communicator& comm,
                        cuda::CudaRunnerOptions o, double atol, const std::function<void(const std::string&)>& say) {
  // Slot 0: the prefix; slots 1..3: members (prefix + own suffix); slots 4..6: the same prompts whole.
  constexpr int kPrefix = 20, kMembers = 3, kSteps = 12, kLogitsStep = 5;
  o.max_batch = 1 + 2 * kMembers;
  o.max_seq_len = 64;
  auto runner = cuda::make_cuda_runner(m, rank, tp_size, arena, comm, o);
  const int64_t vocab = m.model.vocab_size;
  std::mt19937 rng(5);
  auto tokens = [&](int n) {
    std::vector<int32_t> t(n);
    for (auto& x : t) x = static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab));
    return t;
  };
  const std::vector<int32_t> prefix = tokens(kPrefix);
  const int suffix_len[kMembers] = {1, 3, 6};
  std::vector<SeqChunk> prefill;
  runner->forward({{0, 0, prefix}}, nullptr, nullptr);
  for (int i = 0; i < kMembers; ++i) {
    const std::vector<int32_t> suffix = tokens(suffix_len[i]);
    SeqChunk shared{1 + i, kPrefix, suffix};
    shared.prefix_slot = 0;
    shared.prefix_len = kPrefix;
    std::vector<int32_t> whole = prefix;
    whole.insert(whole.end(), suffix.begin(), suffix.end());
    prefill.push_back(shared);
    prefill.push_back({1 + kMembers + i, 0, whole});
  }
  int fails = 0;
  double worst = 0;
  std::vector<int32_t> ids(prefill.size());
  auto compare = [&](const std::vector<float>& logits, size_t rows) {
    for (size_t r = 0; r + 1 < rows; r += 2)
      for (int64_t v = 0; v < vocab; ++v)
        worst = std::max(worst, static_cast<double>(std::fabs(logits[r * vocab + v] - logits[(r + 1) * vocab + v])));
  };
  std::vector<float> logits(prefill.size() * static_cast<size_t>(vocab));
  runner->forward(prefill, logits.data(), ids.data());
  compare(logits, prefill.size());
  bool ids_same = true;
  auto compare_ids = [&] {
    for (size_t r = 0; r + 1 < ids.size(); r += 2) ids_same = ids_same && ids[r] == ids[r + 1];
  };
  compare_ids();
  std::vector<SeqChunk> step = prefill;
  for (int s = 0; s < kSteps; ++s) {
    for (size_t r = 0; r < step.size(); ++r) {  // each row continues with its own greedy token
      step[r].start_pos += static_cast<int>(step[r].tokens.size());
      step[r].tokens = {ids[r]};
    }
    const bool want_logits = s == kLogitsStep;
    runner->forward(step, want_logits ? logits.data() : nullptr, ids.data());
    if (want_logits) compare(logits, step.size());
    compare_ids();
  }
  const bool logits_ok = worst <= atol;
  fails += !logits_ok + !ids_same;
  say(std::string(logits_ok ? "PASS" : "FAIL") + " shared prefix: logits of " + std::to_string(kMembers) +
      " sequences reading a " + std::to_string(kPrefix) + "-token prefix from another slot vs the whole prompts: max |diff| " +
      std::to_string(worst) + " (atol " + std::to_string(atol) + ")");
  say(std::string(ids_same ? "PASS" : "FAIL") + " shared prefix: greedy ids of " + std::to_string(kSteps) +
      " decode steps identical to the unshared sequences");
  return fails;
}

}  // namespace tpshard
