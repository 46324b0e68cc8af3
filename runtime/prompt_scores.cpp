// prompt_scores.cpp: see prompt_scores.h.
#include "runtime/prompt_scores.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "format/error.h"

namespace tpshard {

TokenLogprob row_logprob(const float* row, int64_t vocab, int32_t token, int top_k) {
  double max_v = -INFINITY;
  for (int64_t v = 0; v < vocab; ++v) max_v = std::max(max_v, static_cast<double>(row[v]));
  double sum = 0;
  for (int64_t v = 0; v < vocab; ++v) sum += std::exp(static_cast<double>(row[v]) - max_v);
  const double log_z = max_v + std::log(sum);
  TokenLogprob out;
  out.token = token;
  out.logprob = static_cast<float>(static_cast<double>(row[token]) - log_z);
  const int64_t k = std::min<int64_t>(std::max(top_k, 0), vocab);
  if (k > 0) {
    std::vector<int32_t> ids(static_cast<size_t>(vocab));
    std::iota(ids.begin(), ids.end(), 0);
    std::partial_sort(ids.begin(), ids.begin() + k, ids.end(),
                      [&](int32_t a, int32_t b) { return row[a] > row[b] || (row[a] == row[b] && a < b); });
    for (int64_t i = 0; i < k; ++i)
      out.top.emplace_back(ids[i], static_cast<float>(static_cast<double>(row[ids[i]]) - log_z));
  }
  return out;
}

namespace {

/// A sequence's progress: tokens [0, fed) are in its slot.
struct Pending {
  size_t seq = 0;
  int slot = 0;
  size_t fed = 0;
};

}  // namespace

std::vector<SequenceScores> score_sequences(ModelRunner& runner, const std::vector<std::vector<int32_t>>& sequences,
                                            int top_k) {
  const int64_t vocab = runner.config().vocab_size;
  const int64_t max_rows = std::max<int64_t>(1, kScoreRowFloats / vocab);
  std::vector<SequenceScores> out(sequences.size());
  for (size_t i = 0; i < sequences.size(); ++i) {
    TPS_CHECK(!sequences[i].empty(), "score: sequence " + std::to_string(i) + " is empty", "give at least one token");
    out[i].tokens.reserve(sequences[i].size() - 1);
  }
  size_t next = 0;
  std::vector<Pending> active;
  std::vector<int> free_slots;
  for (int s = runner.max_batch() - 1; s >= 0; --s) free_slots.push_back(s);
  std::vector<float> logits;
  std::vector<int32_t> argmax;
  while (next < sequences.size() || !active.empty()) {
    while (!free_slots.empty() && next < sequences.size()) {
      active.push_back({next++, free_slots.back(), 0});
      free_slots.pop_back();
    }
    // One forward: a piece of each active sequence, at most max_rows tokens in all (every token is a row).
    std::vector<SeqChunk> chunks;
    std::vector<size_t> owner;
    int64_t budget = max_rows;
    for (size_t a = 0; a < active.size() && budget > 0; ++a) {
      Pending& p = active[a];
      const auto& seq = sequences[p.seq];
      const size_t n = std::min<size_t>(seq.size() - p.fed, static_cast<size_t>(budget));
      SeqChunk c;
      c.slot = p.slot;
      c.start_pos = static_cast<int>(p.fed);
      c.tokens.assign(seq.begin() + static_cast<std::ptrdiff_t>(p.fed), seq.begin() + static_cast<std::ptrdiff_t>(p.fed + n));
      c.all_logits = true;
      chunks.push_back(std::move(c));
      owner.push_back(a);
      budget -= static_cast<int64_t>(n);
    }
    const size_t rows = output_rows(chunks);
    logits.resize(rows * static_cast<size_t>(vocab));
    argmax.resize(rows);
    runner.forward(chunks, logits.data(), argmax.data());
    size_t row = 0;
    for (size_t i = 0; i < chunks.size(); ++i) {
      Pending& p = active[owner[i]];
      const auto& seq = sequences[p.seq];
      for (size_t k = 0; k < chunks[i].tokens.size(); ++k, ++row) {
        const size_t pos = p.fed + k;  // this row predicts seq[pos + 1]
        if (pos + 1 >= seq.size()) continue;
        out[p.seq].tokens.push_back(row_logprob(logits.data() + row * vocab, vocab, seq[pos + 1], top_k));
        out[p.seq].greedy.push_back(argmax[row] == seq[pos + 1]);
      }
      p.fed += chunks[i].tokens.size();
    }
    for (size_t a = 0; a < active.size();) {
      if (active[a].fed == sequences[active[a].seq].size()) {
        free_slots.push_back(active[a].slot);
        active.erase(active.begin() + static_cast<std::ptrdiff_t>(a));
      } else {
        ++a;
      }
    }
  }
  return out;
}

}  // namespace tpshard
