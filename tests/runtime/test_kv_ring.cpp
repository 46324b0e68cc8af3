// test_kv_ring.cpp: kv_cache rings of local layers (model/kv_ring.h) and forward() in rounds of bounded
// pieces (runtime/chunk_rounds.h); the models on a ring are checked against transformers in test_models.
#include <doctest/doctest.h>

#include <map>
#include <vector>

#include "model/kv_ring.h"
#include "runtime/chunk_rounds.h"

using namespace tpshard;

namespace {

/// GPT-Neo-2.7B's layering: 32 layers alternating global / local with window 256.
ModelConfig alternating(int64_t window) {
  ModelConfig c;
  c.num_hidden_layers = 32;
  for (int l = 0; l < 32; ++l) c.layer_windows.push_back(l % 2 == 0 ? 0 : window);
  return c;
}

/// The rows a forward() yields for chunks: {slot, position, token} per output row, argmax = position.
void rows_of(const std::vector<SeqChunk>& chunks, float* logits, int32_t* argmax) {
  size_t r = 0;
  for (const SeqChunk& c : chunks)
    for (size_t k = 0; k < c.tokens.size(); ++k) {
      if (!c.all_logits && k + 1 < c.tokens.size()) continue;
      const int pos = c.start_pos + static_cast<int>(k);
      if (logits) {
        logits[3 * r] = static_cast<float>(c.slot);
        logits[3 * r + 1] = static_cast<float>(pos);
        logits[3 * r + 2] = static_cast<float>(c.tokens[k]);
      }
      if (argmax) argmax[r] = pos;
      ++r;
    }
}

}  // namespace

TEST_CASE("kv_ring: local layers keep 2 x window positions per slot, global layers max_seq_len") {
  const ModelConfig c = alternating(256);
  CHECK(kv_cache_positions(c, 0, 2048) == 2048);
  CHECK(kv_cache_positions(c, 1, 2048) == 512);
  // 16 global x 2048 + 16 local x 512: 62.5% of the 32 x 2048 a cache without rings holds.
  CHECK(kv_cache_layer_positions(c, 0, 32, 2048) == 16 * 2048 + 16 * 512);
  CHECK(kv_cache_layer_positions(c, 1, 2, 2048) == 512);
  CHECK(max_step_positions(c, 2048) == 257);  // 512 - 256 + 1
  // A window above half of max_seq_len keeps every position: no ring, no step limit.
  CHECK(kv_cache_positions(c, 1, 400) == 400);
  CHECK(max_step_positions(c, 400) == INT32_MAX);
  ModelConfig dense;
  dense.num_hidden_layers = 4;
  CHECK(kv_cache_layer_positions(dense, 0, 4, 100) == 400);
  CHECK(max_step_positions(dense, 100) == INT32_MAX);
}

TEST_CASE("forward in rounds: pieces arrive in order per slot, at most the limit each, outputs as one call") {
  std::vector<SeqChunk> chunks;
  chunks.push_back({0, 0, {5, 6, 7, 8, 9, 10, 11}});      // 7 tokens: pieces 3 + 3 + 1
  chunks.push_back({1, 4, {20}});                          // a decode step alongside
  SeqChunk scored{2, 0, {30, 31, 32, 33, 34}};             // all_logits: every row, across pieces
  scored.all_logits = true;
  chunks.push_back(scored);
  SeqChunk member{3, 8, {40, 41, 42, 43}};                 // a shared-prefix member
  member.prefix_slot = 4;
  member.prefix_len = 8;
  member.last_step = true;
  chunks.push_back(member);
  const size_t rows = output_rows(chunks);
  REQUIRE(rows == 1 + 1 + 5 + 1);
  std::vector<float> want(rows * 3), got(rows * 3, -1.f);
  std::vector<int32_t> want_ids(rows), got_ids(rows, -1);
  rows_of(chunks, want.data(), want_ids.data());

  std::map<int, int> next_pos;  // per slot: the position its next piece must start at
  for (const SeqChunk& c : chunks) next_pos[c.slot] = c.start_pos;
  int calls = 0;
  forward_in_rounds(chunks, 3, 3, got.data(), got_ids.data(),
                    [&](const std::vector<SeqChunk>& pieces, float* l, int32_t* a) {
                      ++calls;
                      for (const SeqChunk& p : pieces) {
                        CHECK(p.tokens.size() <= 3);
                        CHECK(p.start_pos == next_pos[p.slot]);
                        next_pos[p.slot] += static_cast<int>(p.tokens.size());
                        if (p.slot == 3) {
                          CHECK(p.prefix_slot == 4);
                          CHECK(p.prefix_len == 8);
                          CHECK(p.last_step == (p.start_pos + static_cast<int>(p.tokens.size()) == 12));
                        }
                      }
                      rows_of(pieces, l, a);
                    });
  CHECK(calls == 3);
  CHECK(got == want);
  CHECK(got_ids == want_ids);
  CHECK(next_pos[0] == 7);
  // Without outputs the rounds still run; nothing is written.
  calls = 0;
  forward_in_rounds(chunks, 2, 3, nullptr, nullptr, [&](const std::vector<SeqChunk>&, float* l, int32_t* a) {
    CHECK(l == nullptr);
    CHECK(a == nullptr);
    ++calls;
  });
  CHECK(calls == 4);
  CHECK(needs_rounds(chunks, 4));
  CHECK_FALSE(needs_rounds(chunks, 7));
}
