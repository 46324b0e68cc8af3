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
  double worst = 0, max_logit = 0;
  std::vector<int32_t> ids(prefill.size());
  auto compare = [&](const std::vector<float>& logits, size_t rows) {
    for (size_t r = 0; r + 1 < rows; r += 2)
      for (int64_t v = 0; v < vocab; ++v) {
        worst = std::max(worst, static_cast<double>(std::fabs(logits[r * vocab + v] - logits[(r + 1) * vocab + v])));
        max_logit = std::max(max_logit, static_cast<double>(std::fabs(logits[(r + 1) * vocab + v])));
      }
  };
  // The prefix and the whole prompts go through steps of other token counts (a ring kv_cache prefills
  // in rounds; few-token steps use split-K attention): equal within the dtype's rounding relative to the
  // largest logit, as the all_logits rows below; the greedy ids must be identical.
  const double rtol = m.dtype == DType::F32 ? 1e-4 : 2e-2;
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
  const bool logits_ok = worst <= atol + rtol * max_logit;
  fails += !logits_ok + !ids_same;
  say(std::string(logits_ok ? "PASS" : "FAIL") + " shared prefix: logits of " + std::to_string(kMembers) +
      " sequences reading a " + std::to_string(kPrefix) + "-token prefix from another slot vs the whole prompts: max |diff| " +
      std::to_string(worst) + " (atol " + std::to_string(atol) + " + rtol " + std::to_string(rtol) + " x max |logit| " +
      std::to_string(max_logit) + ")");
  say(std::string(ids_same ? "PASS" : "FAIL") + " shared prefix: greedy ids of " + std::to_string(kSteps) +
      " decode steps identical to the unshared sequences");

  // (2) all_logits: one chunk of 30 tokens in slot 0 vs each prefix's last-position logits in slot 1.
  const std::vector<int32_t> seq = tokens(30);
  SeqChunk all{0, 0, seq};
  all.all_logits = true;
  std::vector<float> rows(seq.size() * static_cast<size_t>(vocab)), last(static_cast<size_t>(vocab));
  std::vector<int32_t> row_ids(seq.size());
  runner->forward({all}, rows.data(), row_ids.data());
  // Different token counts per step may take other GEMM algorithms: the same tolerance.
  double worst_rows = 0;
  max_logit = 0;
  bool argmax_same = true;
  for (size_t n = 1; n <= seq.size(); ++n) {
    int32_t id = -1;
    runner->forward({{1, 0, std::vector<int32_t>(seq.begin(), seq.begin() + static_cast<std::ptrdiff_t>(n))}}, last.data(), &id);
    for (int64_t v = 0; v < vocab; ++v)
    {
      worst_rows = std::max(worst_rows, static_cast<double>(std::fabs(rows[(n - 1) * vocab + v] - last[v])));
      max_logit = std::max(max_logit, static_cast<double>(std::fabs(last[v])));
    }
    argmax_same = argmax_same && (id == row_ids[n - 1] || m.dtype != DType::F32);  // near-ties may flip in 16 bits
  }
  const bool rows_ok = worst_rows <= atol + rtol * max_logit && argmax_same;
  fails += !rows_ok;
  say(std::string(rows_ok ? "PASS" : "FAIL") + " all_logits: 30 rows of one chunk vs each prefix's last-position logits: max |diff| " +
      std::to_string(worst_rows) + " (max |logit| " + std::to_string(max_logit) + ", rtol " + std::to_string(rtol) + ")" +
      (argmax_same ? "" : ", argmax DIFFERS"));
  return fails;
}

}  // namespace tpshard
