// fakes.h: a scripted ModelRunner and a one-character-per-token Tokenizer for the generation tests,
// so scheduling, sampling and stopping are tested without a real model.
#pragma once
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "runtime/model_runner.h"
#include "tokenizer/tokenizer.h"

namespace tpshard::testing {

/// Vocab of 16: 0 = "</s>" (EOS, special), 1 = "<s>" (BOS, special), k >= 2 = the letter 'a' + k - 2.
class FakeTokenizer final : public Tokenizer {
 public:
  std::vector<int32_t> encode(const std::string& text, bool add_special_tokens) const override {
    std::vector<int32_t> ids;
    if (add_special_tokens) ids.push_back(1);
    for (char ch : text) ids.push_back(2 + (ch - 'a'));
    return ids;
  }
  std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const override {
    std::string s;
    for (int32_t id : ids) {
      if (id == 0) s += skip_special_tokens ? "" : "</s>";
      else if (id == 1) s += skip_special_tokens ? "" : "<s>";
      else s += static_cast<char>('a' + id - 2);
    }
    return s;
  }
  int64_t vocab_size() const override { return 16; }
  int32_t bos_id() const override { return 1; }
  std::vector<int32_t> eos_ids() const override { return {0}; }
  bool is_special(int32_t id) const override { return id < 2; }
};

/// Keeps every slot's token history like a kv_cache (and checks start_pos against it). The logits of
/// a sequence depend only on its own history: next(history) gets 10, the others 9 - distance, plus a
/// history-dependent wobble, so greedy and sampled choices are well defined and batch-independent.
class FakeRunner final : public ModelRunner {
 public:
  using NextFn = std::function<int32_t(const std::vector<int32_t>& history)>;
  FakeRunner(int max_batch, int max_seq_len, NextFn next) : max_batch_(max_batch), max_seq_len_(max_seq_len),
        next_(std::move(next)), history_(max_batch) {
    config_.vocab_size = 16;
    config_.eos_token_ids = {0};
  }
  const ModelConfig& config() const override { return config_; }
  int max_batch() const override { return max_batch_; }
  int max_seq_len() const override { return max_seq_len_; }
  void forward(const std::vector<SeqChunk>& chunks, float* logits, int32_t* argmax) override {
    ++forward_calls;
    max_chunks_seen = std::max(max_chunks_seen, chunks.size());
    for (size_t c = 0; c < chunks.size(); ++c) {
      const SeqChunk& ch = chunks[c];
      REQUIRE(ch.slot >= 0);
      REQUIRE(ch.slot < max_batch_);
      auto& h = history_[ch.slot];
      if (ch.start_pos == 0) h.clear();  // a new sequence reuses the slot
      if (ch.prefix_slot >= 0) {
        REQUIRE(ch.prefix_slot < max_batch_);
        REQUIRE(ch.prefix_slot != ch.slot);
        const auto& shared = history_[ch.prefix_slot];
        REQUIRE(static_cast<size_t>(ch.prefix_len) <= shared.size());
        if (ch.start_pos == ch.prefix_len) h.assign(shared.begin(), shared.begin() + ch.prefix_len);  // a new member
        REQUIRE(std::equal(shared.begin(), shared.begin() + ch.prefix_len, h.begin()));  // the prefix is read-only
        ++prefix_chunks;
      }
      REQUIRE(static_cast<size_t>(ch.start_pos) == h.size());
      h.insert(h.end(), ch.tokens.begin(), ch.tokens.end());
      REQUIRE(static_cast<int>(h.size()) <= max_seq_len_);
      const int32_t best = next_(h);
      double wobble = 0;
      for (size_t i = 0; i < h.size(); ++i) wobble += 0.013 * (i + 1) * h[i];
      for (int v = 0; v < 16; ++v) {
        const int dist = (v - best + 16) % 16;
        const float value = dist == 0 ? 10.0f : 9.0f - dist + 0.3f * static_cast<float>(std::sin(wobble + v));
        if (logits) logits[c * 16 + v] = value;
      }
      if (argmax) argmax[c] = best;
    }
  }
  int forward_calls = 0;
  size_t max_chunks_seen = 0;
  int prefix_chunks = 0;  ///< chunks that named a shared prefix

 private:
  ModelConfig config_;
  int max_batch_, max_seq_len_;
  NextFn next_;
  std::vector<std::vector<int32_t>> history_;
};

/// A next-token rule that never picks EOS/BOS: a hash of the history mapped to ids 2..15.
inline int32_t hash_next(const std::vector<int32_t>& h) {
  uint32_t x = 2166136261u;
  for (int32_t t : h) x = (x ^ static_cast<uint32_t>(t)) * 16777619u;
  return 2 + static_cast<int32_t>(x % 14);
}

}  // namespace tpshard::testing
