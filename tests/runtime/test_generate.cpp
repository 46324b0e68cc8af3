// test_generate.cpp: generation scheduling, stopping and sampling with the scripted FakeRunner:
// batch vs alone invariance under continuous batching, seeded sampling, EOS, min_new_tokens,
// stop strings (also across tokens, never streamed), max_new_tokens, prompt-length errors.
#include <doctest/doctest.h>

#include <map>

#include "fakes.h"
#include "format/error.h"
#include "runtime/generate.h"

using namespace tpshard;
using namespace tpshard::testing;

namespace {

std::vector<GenerationRequest> mixed_requests(const SamplingParams& p) {
  std::vector<GenerationRequest> r;
  const std::vector<std::vector<int32_t>> prompts = {{1}, {1, 5, 6, 7, 8, 9}, {1, 3}, {1, 9, 9, 9, 2, 2, 2, 4, 4, 5, 6},
                                                     {1, 4, 4}};
  for (size_t i = 0; i < prompts.size(); ++i) {
    SamplingParams pi = p;
    pi.max_new_tokens = 5 + static_cast<int>(i) * 3;  // different lengths: slots free at different steps
    r.push_back({"req" + std::to_string(i), prompts[i], pi});
  }
  return r;
}

std::vector<GenerationResult> run(const std::vector<GenerationRequest>& reqs, int max_batch,
                                  FakeRunner::NextFn next = hash_next, FakeRunner** runner_out = nullptr) {
  static FakeTokenizer tok;
  static std::vector<std::unique_ptr<FakeRunner>> keep;
  keep.push_back(std::make_unique<FakeRunner>(max_batch, 64, next));
  if (runner_out) *runner_out = keep.back().get();
  return generate(*keep.back(), tok, reqs);
}

}  // namespace

TEST_CASE("greedy results do not depend on batching (continuous batching reuses slots)") {
  SamplingParams p;
  const auto reqs = mixed_requests(p);
  FakeRunner* batched = nullptr;
  const auto all = run(reqs, 2, hash_next, &batched);  // 5 requests through 2 slots
  CHECK(batched->max_chunks_seen == 2);
  REQUIRE(all.size() == reqs.size());
  for (size_t i = 0; i < reqs.size(); ++i) {
    const auto alone = run({reqs[i]}, 1);
    CHECK(all[i].id == reqs[i].id);
    CHECK(all[i].output_ids == alone[0].output_ids);
    CHECK(all[i].output_ids.size() == static_cast<size_t>(reqs[i].params.max_new_tokens));
    CHECK(all[i].finish_reason == "length");
    CHECK(all[i].prompt_tokens == static_cast<int>(reqs[i].prompt_ids.size()));
    // greedy = the runner's rule applied to the growing history
    std::vector<int32_t> h = reqs[i].prompt_ids;
    for (int32_t t : all[i].output_ids) {
      CHECK(t == hash_next(h));
      h.push_back(t);
    }
  }
}

TEST_CASE("a step that prefills a newly admitted prompt also decodes the running requests (one forward)") {
  // Two slots, A (5 new tokens), B (8), C (3): forwards 1 prefill A+B, 2-5 decode, 6 prefill C + decode
  // B, 7-8 decode (B and C end together). Prefill steps that stalled B would take 9.
  std::vector<GenerationRequest> reqs;
  const int lengths[] = {5, 8, 3};
  for (int i = 0; i < 3; ++i) {
    SamplingParams p;
    p.max_new_tokens = lengths[i];
    reqs.push_back({"r" + std::to_string(i), {1, 3 + i, 7}, p});
  }
  FakeRunner runner(2, 64, hash_next);
  FakeTokenizer tok;
  GenerationStats stats;
  const auto all = generate(runner, tok, reqs, {}, &stats);
  CHECK(runner.forward_calls == 8);
  CHECK(stats.decode_tokens == 5 + 8 + 3 - 3);  // every token but each request's first
  CHECK(stats.mixed_decode_tokens == 1);         // B's sixth token, fed with C's prompt
  for (size_t i = 0; i < reqs.size(); ++i) {
    const auto alone = run({reqs[i]}, 1);
    CHECK(all[i].output_ids == alone[0].output_ids);
    CHECK(all[i].output_ids.size() == static_cast<size_t>(lengths[i]));
  }
}

TEST_CASE("seeded sampling is reproducible and independent of batching") {
  SamplingParams p;
  p.temperature = 1.5f;
  p.top_k = 8;
  p.top_p = 0.95f;
  p.seed = 1234;
  const auto reqs = mixed_requests(p);
  const auto a = run(reqs, 5), b = run(reqs, 2), c = run(reqs, 1);
  for (size_t i = 0; i < reqs.size(); ++i) {
    CHECK(a[i].output_ids == b[i].output_ids);
    CHECK(a[i].output_ids == c[i].output_ids);
  }
  // Sampling really samples (differs from greedy somewhere), and another seed gives other tokens.
  SamplingParams g;
  const auto greedy = run(mixed_requests(g), 5);
  auto other = reqs;
  for (auto& r : other) r.params.seed = 99;
  const auto d = run(other, 5);
  bool differs_from_greedy = false, differs_by_seed = false;
  for (size_t i = 0; i < reqs.size(); ++i) {
    differs_from_greedy = differs_from_greedy || a[i].output_ids != greedy[i].output_ids;
    differs_by_seed = differs_by_seed || a[i].output_ids != d[i].output_ids;
  }
  CHECK(differs_from_greedy);
  CHECK(differs_by_seed);
}

TEST_CASE("EOS stops a sequence (kept in output_ids, not in text); min_new_tokens masks it") {
  // EOS is the argmax once the history has 4 tokens; before that 'c' (id 4).
  auto next = [](const std::vector<int32_t>& h) { return h.size() >= 4 ? 0 : 4; };
  SamplingParams p;
  p.max_new_tokens = 10;
  auto r = run({{"a", {1, 2}, p}}, 1, next);
  CHECK(r[0].output_ids == std::vector<int32_t>{4, 4, 0});
  CHECK(r[0].text == "cc");
  CHECK(r[0].finish_reason == "eos");

  p.min_new_tokens = 5;  // EOS masked: the second best (id 1 = distance 1 from EOS) wins while masked
  r = run({{"a", {1, 2}, p}}, 1, next);
  REQUIRE(r[0].output_ids.size() == 6);
  CHECK(r[0].output_ids == std::vector<int32_t>{4, 4, 1, 1, 1, 0});
  CHECK(r[0].finish_reason == "eos");

  p.min_new_tokens = 0;
  p.ignore_eos = true;
  r = run({{"a", {1, 2}, p}}, 1, next);
  CHECK(r[0].output_ids.size() == 10);
  CHECK(r[0].finish_reason == "length");
}

TEST_CASE("stop strings end generation, are excluded from text and never streamed") {
  // Tokens cycle b c d e a b c ... (history length 1 -> 'b').
  auto next = [](const std::vector<int32_t>& h) { return 2 + static_cast<int32_t>(h.size() % 5); };
  SamplingParams p;
  p.max_new_tokens = 20;
  p.stop = {"zz", "ea"};  // "ea" spans two tokens
  FakeTokenizer tok;
  FakeRunner runner(1, 64, next);
  std::string streamed;
  GenerateCallbacks cb;
  std::vector<size_t> text_tokens;  // so_far.text_tokens at each piece
  cb.on_text = [&](size_t, const std::string& s, const GenerationResult& so_far) {
    streamed += s;
    text_tokens.push_back(so_far.text_tokens);
  };
  int done = 0;
  cb.on_done = [&](size_t i, const GenerationResult& res) {
    CHECK(i == 0);
    CHECK(res.finish_reason == "stop");
    ++done;
  };
  const auto r = generate(runner, tok, {{"s", {1}, p}}, cb);
  CHECK(r[0].text == "bcd");
  CHECK(r[0].output_ids == std::vector<int32_t>{3, 4, 5, 6, 2});
  CHECK(r[0].finish_reason == "stop");
  CHECK(streamed == "bcd");
  CHECK(done == 1);
  // Each piece counts the tokens whose text it completes; 'e' (held back: "ea" might follow) starts the stop
  // string, so it is not counted, nor is 'a'.
  CHECK(text_tokens == std::vector<size_t>{1, 2, 3});
  CHECK(r[0].text_tokens == 3);

  p.stop = {"cdx"};  // a prefix that never completes is held back, then released
  streamed.clear();
  text_tokens.clear();
  FakeRunner runner2(1, 64, next);
  cb.on_done = nullptr;
  p.max_new_tokens = 4;
  const auto r2 = generate(runner2, tok, {{"s", {1}, p}}, cb);
  CHECK(r2[0].text == "bcde");
  CHECK(streamed == "bcde");
  CHECK(text_tokens == std::vector<size_t>{1, 4});  // 'c' and 'd' were held back, released with 'e' at the end
  CHECK(r2[0].text_tokens == 4);
  CHECK(r2[0].finish_reason == "length");
}

TEST_CASE("repetition penalty moves away from a repeated token") {
  auto next = [](const std::vector<int32_t>&) { return 5; };
  SamplingParams p;
  p.max_new_tokens = 3;
  CHECK(run({{"a", {1}, p}}, 1, next)[0].output_ids == std::vector<int32_t>{5, 5, 5});
  p.repetition_penalty = 2.0f;  // 10 / 2 = 5 < 9 - 1 + wobble of id 6
  const auto r = run({{"a", {1}, p}}, 1, next)[0].output_ids;
  CHECK(r[0] == 5);
  CHECK(r[1] == 6);
}

TEST_CASE("max_new_tokens 0 and prompt length errors") {
  SamplingParams p;
  p.max_new_tokens = 0;
  auto r = run({{"z", {1, 2, 3}, p}}, 1);
  CHECK(r[0].output_ids.empty());
  CHECK(r[0].finish_reason == "length");

  FakeTokenizer tok;
  FakeRunner small(1, 8, hash_next);
  p.max_new_tokens = 4;
  std::vector<int32_t> long_prompt(9, 3);
  try {
    generate(small, tok, {{"too-long", long_prompt, p}});
    FAIL("expected an Error");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("too-long") != std::string::npos);
    CHECK(std::string(e.what()).find("--max-seq-len 8") != std::string::npos);
  }
  // 5 prompt + 4 new - 1 = 8 positions fit exactly; 5 new do not.
  CHECK(generate(small, tok, {{"fits", std::vector<int32_t>(5, 3), p}})[0].output_ids.size() == 4);
  p.max_new_tokens = 5;
  CHECK_THROWS_AS(generate(small, tok, {{"x", std::vector<int32_t>(5, 3), p}}), Error);
}

TEST_CASE("out-of-range sampling options are refused before anything runs, naming the request") {
  FakeTokenizer tok;
  FakeRunner small(1, 16, hash_next);
  const auto refused = [&](SamplingParams p, const std::string& field) {
    try {
      generate(small, tok, {{"req-7", {1, 2}, p}});
      return false;
    } catch (const Error& e) {
      const std::string what = e.what();
      return what.find("req-7") != std::string::npos && what.find(field) != std::string::npos;
    }
  };
  SamplingParams p;
  p.max_new_tokens = 2;
  CHECK(generate(small, tok, {{"ok", {1, 2}, p}})[0].output_ids.size() == 2);
  const std::vector<std::pair<std::string, void (*)(SamplingParams&)>> cases = {
      {"temperature", [](SamplingParams& q) { q.temperature = -1; }},
      {"top_p", [](SamplingParams& q) { q.top_p = 2; }},
      {"top_p", [](SamplingParams& q) { q.top_p = 0; }},
      {"top_k", [](SamplingParams& q) { q.top_k = -3; }},
      {"min_p", [](SamplingParams& q) { q.min_p = 1.5f; }},
      {"repetition_penalty", [](SamplingParams& q) { q.repetition_penalty = 0; }},
      {"min_new_tokens 3 is greater than max_new_tokens 2", [](SamplingParams& q) { q.min_new_tokens = 3; }},
  };
  for (const auto& [field, spoil] : cases) {
    SamplingParams q = p;
    spoil(q);
    CAPTURE(field);
    CHECK(refused(q, field));
  }
}

TEST_CASE("prompts with a common prefix prefill it once, read it shared, and give the unshared results") {
  // Two groups (20 and 18 common tokens; suffixes start with different tokens) and two loners, interleaved.
  auto prefix = [](int32_t base, int n) {
    std::vector<int32_t> p = {1};
    for (int i = 1; i < n; ++i) p.push_back(2 + (base + i * 7) % 14);
    return p;
  };
  const std::vector<int32_t> pa = prefix(3, 20), pb = prefix(5, 18);
  auto with = [](std::vector<int32_t> p, std::vector<int32_t> suffix) {
    p.insert(p.end(), suffix.begin(), suffix.end());
    return p;
  };
  const std::vector<std::vector<int32_t>> prompts = {
      with(pa, {2, 3, 4}), with(pb, {5}), {1, 9, 9}, with(pa, {6}), with(pb, {7, 7, 7, 7}),
      with(pa, {8, 2}), pa /* the whole prefix: its last token is its own */, {1, 4}, with(pb, {2, 2})};
  for (const float temperature : {0.0f, 1.2f}) {
    std::vector<GenerationRequest> reqs;
    for (size_t i = 0; i < prompts.size(); ++i) {
      SamplingParams p;
      p.temperature = temperature;
      p.seed = 7;
      p.max_new_tokens = 2 + static_cast<int>(i % 4) * 2;
      reqs.push_back({"r" + std::to_string(i), prompts[i], p});
    }
    reqs[5].params.max_new_tokens = 0;  // a member that finishes at admission
    FakeTokenizer tok;
    for (const int max_batch : {2, 3, 16}) {
      CAPTURE(max_batch);
      FakeRunner runner(max_batch, 64, hash_next);
      GenerationStats stats;
      const auto shared = generate(runner, tok, reqs, {}, &stats);
      CHECK(runner.prefix_chunks > 0);
      // Group A: 4 members, prefix 19 (pa itself keeps its last token); group B: 3 members, prefix 18.
      CHECK(stats.shared_prefix_tokens == 4 * 19 + 3 * 18);
      int64_t suffix_tokens = 0;
      for (size_t i = 0; i < prompts.size(); ++i) suffix_tokens += static_cast<int64_t>(prompts[i].size());
      suffix_tokens -= 4 * 19 + 3 * 18;
      CHECK(stats.prefill_tokens == 19 + 18 + suffix_tokens - static_cast<int64_t>(prompts[5].size() - 19));
      for (size_t i = 0; i < reqs.size(); ++i) {
        FakeRunner alone_runner(1, 64, hash_next);  // one slot: nothing is shared
        const auto alone = generate(alone_runner, tok, {reqs[i]});
        CHECK(alone_runner.prefix_chunks == 0);
        CHECK(shared[i].id == reqs[i].id);
        CHECK(shared[i].output_ids == alone[0].output_ids);
        CHECK(shared[i].prompt_tokens == static_cast<int>(prompts[i].size()));
      }
    }
  }
}

TEST_CASE("requests added one at a time join a prefix in use, or group with the waiting ones, and give the unshared results") {
  std::vector<int32_t> pa = {1};
  for (int i = 1; i < 20; ++i) pa.push_back(2 + (3 + i * 7) % 14);
  auto with = [](std::vector<int32_t> p, size_t keep, std::vector<int32_t> suffix) {
    p.resize(keep);
    p.insert(p.end(), suffix.begin(), suffix.end());
    return p;
  };
  for (const float temperature : {0.0f, 1.1f}) {
    CAPTURE(temperature);
    auto req = [&](const std::string& id, std::vector<int32_t> prompt) {
      SamplingParams p;
      p.temperature = temperature;
      p.seed = 3;
      p.max_new_tokens = 6;
      return GenerationRequest{id, std::move(prompt), p};
    };
    const std::vector<GenerationRequest> reqs = {
        req("r0", with(pa, 20, {2, 3})),     // alone at first
        req("r1", with(pa, 20, {5})),        // added before a step: groups with the waiting r0 (20 tokens)
        req("r2", with(pa, 20, {7, 7})),     // added after a step: joins the prefix in use (20)
        req("r3", with(pa, 17, {9, 9, 9})),  // joins it for its first 17 tokens
        req("r4", {1, 4, 4}),                // a loner
        req("r5", with(pa, 20, {6})),        // after every member finished: with r6, a new group
        req("r6", with(pa, 20, {8, 8}))};
    FakeTokenizer tok;
    FakeRunner runner(4, 64, hash_next);
    BatchGenerator g(runner, tok);
    g.add({reqs[0]});
    g.add({reqs[1]});
    g.step();  // admits r0, r1 and their prefix: 3 of 4 slots
    CHECK(g.slots_in_use() == 3);
    g.add({reqs[2]});
    g.add({reqs[3]});
    g.add({reqs[4]});
    while (g.busy()) g.step();
    CHECK(g.stats().shared_prefix_tokens == 20 + 20 + 20 + 17);
    g.add({reqs[5]});
    g.add({reqs[6]});
    while (g.busy()) g.step();
    CHECK(g.stats().shared_prefix_tokens == 20 + 20 + 20 + 17 + 20 + 20);
    CHECK(g.slots_in_use() == 0);
    CHECK(runner.prefix_chunks > 0);
    for (size_t i = 0; i < reqs.size(); ++i) {
      CAPTURE(i);
      FakeRunner alone_runner(1, 64, hash_next);  // one slot: nothing is shared
      const GenerationResult r = g.take_result(i);
      CHECK(r.id == reqs[i].id);
      CHECK(r.output_ids == generate(alone_runner, tok, {reqs[i]})[0].output_ids);
    }
  }
}

namespace {

/// Runs reqs through a BatchGenerator of max_batch slots; before step number s (counting from 0) it cancels
/// the indices cancel_at[s]. Returns every result by index (cancelled ones included) and the slots in use
/// right after each cancel (-1 where none was made).
struct CancelRun {
  std::vector<GenerationResult> results;
  std::vector<int> slots_before, slots_after;
  int slots_at_end = -1;
};
CancelRun run_with_cancels(const std::vector<GenerationRequest>& reqs, int max_batch,
                           const std::map<int, std::vector<size_t>>& cancel_at) {
  FakeTokenizer tok;
  FakeRunner runner(max_batch, 64, hash_next);
  std::vector<size_t> done_order;
  GenerateCallbacks cb;
  cb.on_done = [&](size_t i, const GenerationResult&) { done_order.push_back(i); };
  BatchGenerator g(runner, tok, cb);
  g.add(reqs);
  CancelRun out;
  for (int s = 0; g.busy(); ++s) {
    const auto it = cancel_at.find(s);
    if (it != cancel_at.end())
      for (size_t i : it->second) {
        out.slots_before.push_back(g.slots_in_use());
        CHECK(g.cancel(i));
        CHECK(!g.cancel(i));  // a second cancel of the same request does nothing
        out.slots_after.push_back(g.slots_in_use());
      }
    g.step();
  }
  out.slots_at_end = g.slots_in_use();
  CHECK(g.running() == 0);
  CHECK(g.waiting() == 0);
  CHECK(done_order.size() == reqs.size());  // on_done once per request, cancelled ones included
  for (size_t i = 0; i < reqs.size(); ++i) out.results.push_back(g.take_result(i));
  CHECK(!g.cancel(reqs.size()));  // never added
  CHECK(!g.cancel(0));            // finished and taken
  return out;
}

}  // namespace

TEST_CASE("cancel ends a running or waiting request, frees its slot, and leaves the others bit-exact") {
  SamplingParams p;
  p.max_new_tokens = 12;
  p.logprobs = 2;  // compare the float log-probabilities too, not only the ids
  p.temperature = 0.9f;
  p.seed = 11;
  std::vector<GenerationRequest> reqs = mixed_requests(p);  // 5 requests, 3 slots below: 2 wait at first
  for (auto& r : reqs) r.params = p;
  // Step 0 admits and prefills requests 0..2; before step 3, request 1 runs (decoding) and 4 waits.
  const CancelRun cancelled = run_with_cancels(reqs, 3, {{3, {1, 4}}});
  REQUIRE(cancelled.slots_before.size() == 2);
  CHECK(cancelled.slots_before[0] == 3);
  CHECK(cancelled.slots_after[0] == 2);  // the running one's slot is free at once
  CHECK(cancelled.slots_after[1] == 2);  // a waiting one held no slot
  CHECK(cancelled.slots_at_end == 0);
  const GenerationResult& c1 = cancelled.results[1];
  CHECK(c1.finish_reason == "abort");
  CHECK(c1.output_ids.size() == 3);  // one token from the prefill, two decode steps
  CHECK(c1.logprobs.size() == 3);
  CHECK(c1.id == "req1");
  CHECK(cancelled.results[4].finish_reason == "abort");
  CHECK(cancelled.results[4].output_ids.empty());
  CHECK(cancelled.results[4].prompt_tokens == static_cast<int>(reqs[4].prompt_ids.size()));
  // The others, against a run that never had the cancelled ones (same ids: same RNG streams).
  const std::vector<GenerationRequest> kept = {reqs[0], reqs[2], reqs[3]};
  FakeRunner runner(3, 64, hash_next);
  FakeTokenizer tok;
  const auto alone = generate(runner, tok, kept);
  const size_t kept_index[] = {0, 2, 3};
  for (size_t k = 0; k < kept.size(); ++k) {
    const GenerationResult& a = cancelled.results[kept_index[k]];
    CAPTURE(k);
    CHECK(a.finish_reason == "length");
    CHECK(a.output_ids == alone[k].output_ids);
    CHECK(a.text == alone[k].text);
    REQUIRE(a.logprobs.size() == alone[k].logprobs.size());
    for (size_t t = 0; t < a.logprobs.size(); ++t) {
      CHECK(a.logprobs[t].logprob == alone[k].logprobs[t].logprob);  // bit-exact
      CHECK(a.logprobs[t].top == alone[k].logprobs[t].top);
    }
  }
  // The cancelled running request's tokens so far are its uncancelled run's first tokens.
  const auto full = generate(runner, tok, {reqs[1]});
  CHECK(std::equal(c1.output_ids.begin(), c1.output_ids.end(), full[0].output_ids.begin()));
}

TEST_CASE("cancelling members of a shared prefix frees the prefix's slot with its last member") {
  std::vector<int32_t> prefix = {1};
  for (int i = 1; i < 20; ++i) prefix.push_back(2 + (i * 5) % 14);
  SamplingParams p;
  p.max_new_tokens = 8;
  std::vector<GenerationRequest> reqs;
  for (int32_t s : {3, 7, 9}) {
    std::vector<int32_t> prompt = prefix;
    prompt.push_back(s);
    reqs.push_back({"m" + std::to_string(s), prompt, p});
  }
  reqs.push_back({"loner", {1, 4, 4}, p});
  // 4 slots: the prefix and the three members; the loner (queued after the group) waits for a slot.
  SUBCASE("cancel one member: the prefix stays for the others") {
    const CancelRun r = run_with_cancels(reqs, 4, {{2, {0}}});
    CHECK(r.slots_before[0] == 4);
    CHECK(r.slots_after[0] == 3);
    CHECK(r.results[0].finish_reason == "abort");
    CHECK(r.slots_at_end == 0);
    FakeRunner alone_runner(1, 64, hash_next);
    FakeTokenizer tok;
    for (size_t i = 1; i < reqs.size(); ++i) {
      CAPTURE(i);
      CHECK(r.results[i].finish_reason == "length");
      CHECK(r.results[i].output_ids == generate(alone_runner, tok, {reqs[i]})[0].output_ids);
    }
  }
  SUBCASE("cancel every member: the prefix's slot is freed with the last one") {
    const CancelRun r = run_with_cancels(reqs, 4, {{2, {0, 1, 2}}});
    REQUIRE(r.slots_after.size() == 3);
    CHECK(r.slots_before[0] == 4);  // the prefix and its three members; the loner waits
    CHECK(r.slots_after[0] == 3);
    CHECK(r.slots_after[1] == 2);   // the last member and the prefix
    CHECK(r.slots_after[2] == 0);   // the last member took the prefix's slot with it
    CHECK(r.results[3].finish_reason == "length");
    CHECK(r.slots_at_end == 0);
  }
}

TEST_CASE("a long-running generator that takes every result holds the records of the unfinished ones only") {
  // As `tprun serve` runs it: requests added one at a time between steps (every 7th sharing a 20-token
  // prefix with the next), results taken in on_done (during the step) or after it; out of order too.
  std::vector<int32_t> shared = {1};
  for (int i = 1; i < 20; ++i) shared.push_back(2 + i % 13);
  FakeRunner runner(4, 64, hash_next);
  FakeTokenizer tok;
  std::vector<size_t> done;
  GenerateCallbacks cb;
  BatchGenerator* gen = nullptr;
  std::map<size_t, GenerationResult> taken;
  cb.on_done = [&](size_t index, const GenerationResult&) {
    if (index % 2 == 0) taken[index] = gen->take_result(index);  // inside the step
    else done.push_back(index);
  };
  BatchGenerator g(runner, tok, cb);
  gen = &g;
  size_t most_extra = 0;  // records held beyond the unfinished requests (finished ones newer than those)
  const size_t n = 300;
  for (size_t i = 0; i < n || g.busy(); ++i) {
    if (i < n) {
      SamplingParams p;
      p.max_new_tokens = 1 + static_cast<int>(i % 5);
      std::vector<int32_t> prompt = i % 7 < 2 ? shared : std::vector<int32_t>{1};
      prompt.push_back(3 + static_cast<int32_t>(i % 11));
      g.add({GenerationRequest{"r" + std::to_string(i), prompt, p}});
    }
    g.step();
    // the odd ones after the step, newest first
    std::sort(done.rbegin(), done.rend());
    for (size_t k : done) taken[k] = g.take_result(k);
    done.clear();
    most_extra = std::max(most_extra, g.records_held() - g.waiting() - g.running());
  }
  CHECK(taken.size() == n);
  for (const auto& [k, r] : taken) {
    CAPTURE(k);
    CHECK(r.id == "r" + std::to_string(k));
    CHECK(r.output_ids.size() == 1 + k % 5);
  }
  CHECK(g.records_held() == 0);
  CHECK(most_extra <= 8);  // the unfinished ones and a few taken after them: not the 300 requests added
  CHECK_THROWS_AS(g.take_result(0), Error);  // taken and dropped
  CHECK_FALSE(g.cancel(5));
}
