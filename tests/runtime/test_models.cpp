// test_models.cpp: whole models on the CPU backend. The HF fixtures (tests/fixtures/*) are converted
// by the tpshard binary into the build directory, then: last-position logits of a batch of prompts of
// different lengths vs transformers (fp32; max |ours - hf| / max |hf| <= 1e-4), greedy tokens vs
// transformers, tp 1/2/4 invariance, batch vs alone invariance, and stories260K's published greedy run.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>

#include <nlohmann/json.hpp>

#include "fakes.h"
#include "format/error.h"
#include "model/manifest.h"
#include "runtime/generate.h"
#include "runtime/prompt_scores.h"
#include "runtime/rope.h"
#include "runtime/session.h"

using namespace tpshard;

namespace {

const std::vector<int> kTpSizes = {1, 2, 4};

/// Convert tests/fixtures/NAME (at tp 1, 2, 4 and those of tps) into the build dir once per test run;
/// returns the model dir.
std::string converted(const std::string& name, const std::vector<int>& tps = kTpSizes) {
  static std::map<std::string, std::string> done;
  static std::mutex m;
  std::lock_guard<std::mutex> lock(m);
  auto it = done.find(name);
  if (it != done.end()) return it->second;
  std::filesystem::create_directories(TPSHARD_TEST_OUT_DIR);
  const std::string out = std::string(TPSHARD_TEST_OUT_DIR) + "/" + name;
  std::string tp_list = "1,2,4";
  for (int tp : tps)
    if (tp != 1 && tp != 2 && tp != 4) tp_list += "," + std::to_string(tp);
  const std::string cmd = std::string(TPSHARD_BIN_DIR) + "/tpshard convert " + TPSHARD_FIXTURES_DIR + "/" + name +
                          " -o " + out + " --tp " + tp_list + " --force -q";
  INFO("command: " << cmd);
  REQUIRE(std::system(cmd.c_str()) == 0);
  done[name] = out;
  return out;
}

nlohmann::json reference(const std::string& name) {
  std::ifstream f(std::string(TPSHARD_FIXTURES_DIR) + "/" + name + "/reference.json");
  REQUIRE(f.good());
  return nlohmann::json::parse(f);
}

SessionOptions cpu_session(const std::string& dir, int tp, int max_batch) {
  SessionOptions o;
  o.model_dir = dir;
  o.tp_size = tp;
  o.device = Device::Cpu;
  o.max_batch = max_batch;
  o.max_seq_len = 0;  // min(max_position_embeddings, 2048)
  o.quiet = true;
  o.cpu_threads = 1;
  return o;
}

/// Last-position logits [prompts][vocab] of all prompts in ONE forward (one chunk per prompt).
std::vector<std::vector<float>> batch_logits(const std::string& dir, int tp,
                                             const std::vector<std::vector<int32_t>>& prompts) {
  std::vector<std::vector<float>> out;
  run_on_ranks(cpu_session(dir, tp, static_cast<int>(prompts.size())), [&](RankContext& ctx) {
    std::vector<SeqChunk> chunks;
    for (size_t i = 0; i < prompts.size(); ++i) chunks.push_back({static_cast<int>(i), 0, prompts[i]});
    const int64_t V = ctx.runner->config().vocab_size;
    std::vector<float> logits(chunks.size() * V);
    std::vector<int32_t> argmax(chunks.size());
    ctx.runner->forward(chunks, logits.data(), argmax.data());
    for (size_t i = 0; i < chunks.size(); ++i)  // argmax output agrees with the logits
      CHECK(argmax[i] == std::max_element(logits.begin() + i * V, logits.begin() + (i + 1) * V) - (logits.begin() + i * V));
    if (ctx.is_output_rank())
      for (size_t i = 0; i < chunks.size(); ++i) out.emplace_back(logits.begin() + i * V, logits.begin() + (i + 1) * V);
  });
  return out;
}

std::vector<std::vector<int32_t>> greedy(const std::string& dir, int tp, const std::vector<std::vector<int32_t>>& prompts,
                                         int new_tokens, int max_batch) {
  std::vector<std::vector<int32_t>> out;
  testing::FakeTokenizer fake;
  run_on_ranks(cpu_session(dir, tp, max_batch), [&](RankContext& ctx) {
    std::vector<GenerationRequest> reqs;
    for (size_t i = 0; i < prompts.size(); ++i) {
      SamplingParams p;
      p.max_new_tokens = new_tokens;
      p.ignore_eos = true;  // the references are 16 tokens each, whatever they contain
      reqs.push_back({std::to_string(i), prompts[i], p});
    }
    // Text is not checked here; the fixtures without a tokenizer get the fake one.
    const Tokenizer& tok = ctx.tokenizer ? *ctx.tokenizer : static_cast<const Tokenizer&>(fake);
    const auto res = generate(*ctx.runner, tok, reqs);
    if (ctx.is_output_rank())
      for (const auto& r : res) out.push_back(r.output_ids);
  });
  return out;
}

/// max |a - b| / max |b|
double rel_err(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num = std::max(num, std::abs(static_cast<double>(a[i]) - b[i]));
    den = std::max(den, std::abs(static_cast<double>(b[i])));
  }
  return num / den;
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(static_cast<double>(a[i]) - b[i]));
  return m;
}

void check_against_hf(const std::string& name, const std::vector<int>& tps = kTpSizes) {
  const nlohmann::json ref = reference(name);
  const auto prompts = ref["prompts"].get<std::vector<std::vector<int32_t>>>();
  const auto hf_logits = ref["last_logits"].get<std::vector<std::vector<float>>>();
  const auto hf_greedy = ref["greedy"].get<std::vector<std::vector<int32_t>>>();
  const std::string dir = converted(name, tps);
  std::vector<std::vector<float>> tp1;
  double worst = 0;
  for (const int tp : tps) {
    CAPTURE(name);
    CAPTURE(tp);
    const auto logits = batch_logits(dir, tp, prompts);
    REQUIRE(logits.size() == prompts.size());
    for (size_t i = 0; i < prompts.size(); ++i) {
      CAPTURE(i);
      const double err = rel_err(logits[i], hf_logits[i]);
      worst = std::max(worst, err);
      CHECK(err <= 1e-4);
      if (tp == 1) continue;
      CHECK(max_abs_diff(logits[i], tp1[i]) <= 1e-5);  // tp invariance
    }
    if (tp == 1) tp1 = logits;
    const int n_new = static_cast<int>(hf_greedy[0].size());
    CHECK(greedy(dir, tp, prompts, n_new, 2) == hf_greedy);  // 4 prompts through 2 slots
  }
  MESSAGE(name << ": worst max rel err of last logits vs HF over tp " << tps.size() << " sizes: " << worst);
}

}  // namespace

TEST_CASE("GPT-NeoX, parallel residual, partial rotary, gelu: CPU backend vs transformers at tp 1, 2, 3 (uneven), 4") {
  check_against_hf("tiny-gpt-neox-par", {1, 2, 3, 4});
}
TEST_CASE("GPT-NeoX, sequential residual, full rotary, gelu_fast: vs transformers at tp 1, 2, 4") {
  check_against_hf("tiny-gpt-neox-seq");
}
TEST_CASE("Llama, GQA 8/2 (KV heads replicated at tp 4; KV groups split unevenly at 3, 5, 6, 7), tied embeddings: vs transformers at tp 1..7") {
  check_against_hf("tiny-llama", {1, 2, 3, 4, 5, 6, 7});
}
TEST_CASE("Qwen2, q/k/v bias, untied: vs transformers at tp 1, 2, 3 (uneven), 4") { check_against_hf("tiny-qwen2", {1, 2, 3, 4}); }
TEST_CASE("InternLM2 (wqkv packed per KV group, q/k/v/o bias, dynamic rope) vs the Llama it was repacked from at tp 1, 2, 4, 8 (KV heads replicated at 4, 8) and 3, 5 (uneven)") {
  check_against_hf("tiny-internlm2", {1, 2, 3, 4, 5, 8});
}
TEST_CASE("NVLM-D layout (Qwen2 under llm_config / language_model.*, vision tower skipped) vs the plain Qwen2 at tp 1, 2, 4") {
  check_against_hf("tiny-nvlm-d");
}
TEST_CASE("Llama 3 rope scaling: vs transformers at tp 1, 2, 4") { check_against_hf("tiny-llama3-rope"); }
TEST_CASE("stories260K prompts: vs transformers at tp 1, 2, 4") { check_against_hf("stories260K"); }
TEST_CASE("bf16 weights (widened to f32 when loaded): vs transformers at tp 1, 2, 4") {
  check_against_hf("tiny-llama-bf16");
}
TEST_CASE("checkpoint in several safetensors files: vs transformers at tp 1, 2, 4") {
  check_against_hf("tiny-llama-sharded");
}

TEST_CASE("GPT-Neo, learned positions, global/local attention (window 4), unscaled scores: vs transformers at tp 1, 2, 4, 5, 10 and 3, 6, 7 (uneven)") {
  check_against_hf("tiny-gpt-neo", {1, 2, 3, 4, 5, 6, 7, 10});
}

TEST_CASE("GPT-Neo local layers keep a kv_cache ring of 2 x window positions per slot (the memory plan's count)") {
  const std::string dir = converted("tiny-gpt-neo");
  run_on_ranks(cpu_session(dir, 1, 2), [&](RankContext& ctx) {
    const ModelConfig& c = ctx.runner->config();
    int64_t positions = 0;
    for (int64_t w : c.layer_windows) positions += w > 0 ? 2 * w : ctx.runner->max_seq_len();
    CHECK(positions < c.num_hidden_layers * ctx.runner->max_seq_len());  // the fixture has local layers
    CHECK(ctx.runner->kv_cache_bytes() ==
          static_cast<uint64_t>(2 * 2 * positions * c.num_key_value_heads * c.head_dim) * sizeof(float));
  });
}

TEST_CASE("Llama, head_dim 64 apart from hidden / heads, GQA 4/2, prompts of 1 to 130 tokens (the GPU prefill kernel's shapes): vs transformers at tp 1, 2, 4") {
  check_against_hf("tiny-llama-hd64");
}

TEST_CASE("Mistral, sliding_window 6 (shorter than the prompts), GQA 8/2: vs transformers at tp 1, 2, 4") {
  check_against_hf("tiny-mistral-swa");
}

TEST_CASE("Qwen3, per-head q/k RMSNorm, head_dim 16 apart from hidden / heads, GQA 8/2: vs transformers at tp 1, 2, 3 (uneven), 4") {
  check_against_hf("tiny-qwen3", {1, 2, 3, 4});
}
TEST_CASE("Phi-3, fused qkv_proj and gate_up_proj, sliding_window 6, GQA 8/2: vs transformers at tp 1, 2, 3 (uneven), 4") {
  check_against_hf("tiny-phi3", {1, 2, 3, 4});
}

TEST_CASE("Phi-3 with longrope rope scaling (short factors, attention factor from max / original positions): vs "
          "transformers at tp 1, 2, 3 (uneven)") {
  check_against_hf("tiny-phi3-longrope", {1, 2, 3});
}

TEST_CASE("longrope: inv_freq and attention factor equal transformers' _compute_longrope_parameters; sequences end at "
          "original_max_position_embeddings") {
  const nlohmann::json ref = reference("tiny-phi3-longrope");
  const std::string dir = converted("tiny-phi3-longrope", {1, 2, 3});
  const ModelConfig c = load_manifest(dir).model;
  CHECK(c.rope_type == RopeType::LongRope);
  CHECK(c.rope_attention_factor == doctest::Approx(ref["longrope_attention_scaling"].get<double>()).epsilon(1e-12));
  CHECK(c.rope_attention_factor > 1.0);
  const auto hf = ref["longrope_inv_freq"].get<std::vector<float>>();
  const auto ours = rope_inv_freq(c);
  REQUIRE(ours.size() == hf.size());
  for (size_t i = 0; i < hf.size(); ++i) {
    CAPTURE(i);
    CHECK(std::abs(ours[i] - hf[i]) <= 1e-6f * std::abs(hf[i]));
  }
  CHECK(model_position_limit(c) == 64);  // original_max_position_embeddings, not max_position_embeddings 128
  SessionOptions o = cpu_session(dir, 1, 0);
  CHECK(effective_max_seq_len(o, c) == 64);
  o.max_seq_len = 65;
  CHECK_THROWS_WITH_AS(effective_max_seq_len(o, c), doctest::Contains("original_max_position_embeddings 64"), tpshard::Error);
}

TEST_CASE("StarCoder2: LayerNorm with bias, biases on q/k/v/o and the gelu MLP, sliding_window 6, GQA 8/2, tied: vs transformers at tp 1, 2, 3 (uneven), 4") {
  check_against_hf("tiny-starcoder2", {1, 2, 3, 4});
}

TEST_CASE("GPT-J: interleaved rotary on 8 of 16 dims, one ln_1 for parallel attention + MLP, lm_head bias: vs transformers at tp 1, 2, 3 (uneven), 4") {
  check_against_hf("tiny-gptj", {1, 2, 3, 4});
}

TEST_CASE("Falcon-40B layout: query_key_value per KV group (GQA 8/2), ln_attn / ln_mlp, biases, tied: vs transformers at tp 1, 2, 3 (uneven), 4") {
  check_against_hf("tiny-falcon", {1, 2, 3, 4});
}

TEST_CASE("Falcon-7B layout: multi-query (one KV head), one input_layernorm for both parallel branches: vs transformers at tp 1, 2, 3 (uneven), 4") {
  check_against_hf("tiny-falcon-mq", {1, 2, 3, 4});
}

TEST_CASE("Gemma 2: scaled embedding, RMSNorm x (1 + w), post-attention / post-feedforward norms, GeGLU, query_pre_attn_scalar, "
          "attention and final logit soft-caps, local (window 6, shorter than the prompts) / global layers, head_dim 32 "
          "apart from hidden / heads, GQA 4/2, tied: vs transformers at tp 1, 2, 3 (uneven), 4") {
  check_against_hf("tiny-gemma2", {1, 2, 3, 4});
}

TEST_CASE("OLMo 2: no pre-norms, post-attention / post-feedforward norms, q/k RMSNorm over the whole projection (sums of "
          "squares all_reduced), GQA 8/2 (KV groups split at tp 3, replicated at 4), untied: vs transformers at tp 1, 2, 3 (uneven), 4") {
  check_against_hf("tiny-olmo2", {1, 2, 3, 4});
}

TEST_CASE("Mixtral: 8 experts, top 2 renormalized, each expert's MLP split over the ranks, sliding_window 6, GQA 8/2: vs "
          "transformers at tp 1, 2, 3 (uneven heads), 4") {
  check_against_hf("tiny-mixtral", {1, 2, 3, 4});
}

TEST_CASE("Gemma 2's soft-caps bite at the fixture's scale: every last logit within the final cap, the largest near it") {
  const nlohmann::json ref = reference("tiny-gemma2");
  const nlohmann::json config = nlohmann::json::parse(std::ifstream(std::string(TPSHARD_FIXTURES_DIR) + "/tiny-gemma2/config.json"));
  const double cap = config["final_logit_softcapping"].get<double>();
  for (const auto& logits : ref["last_logits"]) {
    double top = 0;
    for (const auto& v : logits) top = std::max(top, std::abs(v.get<double>()));
    CHECK(top < cap);
    CHECK(top > 0.6 * cap);  // tanh is far from linear there: without the cap these logits differ
  }
}

TEST_CASE("yarn rope scaling (factor 4, original_max_position_embeddings 32): vs transformers at tp 1, 2") {
  check_against_hf("tiny-llama-yarn", {1, 2});
}

TEST_CASE("yarn rope: inv_freq and attention factor equal transformers' _compute_yarn_parameters") {
  const nlohmann::json ref = reference("tiny-llama-yarn");
  const std::string dir = converted("tiny-llama-yarn", {1, 2});
  const ModelConfig c = load_manifest(dir).model;
  CHECK(c.rope_type == RopeType::Yarn);
  CHECK(c.rope_attention_factor == doctest::Approx(ref["yarn_attention_scaling"].get<double>()).epsilon(1e-12));
  const auto hf = ref["yarn_inv_freq"].get<std::vector<float>>();
  const auto ours = rope_inv_freq(c);
  REQUIRE(ours.size() == hf.size());
  for (size_t i = 0; i < hf.size(); ++i) {
    CAPTURE(i);
    CHECK(std::abs(ours[i] - hf[i]) <= 1e-6f * std::abs(hf[i]));
  }
  ModelConfig plain = c;
  plain.rope_type = RopeType::Default;
  CHECK(ours != rope_inv_freq(plain));  // the scaling changes some frequencies
}

TEST_CASE("the CPU backend's kv_cache slots: 8 unless --max-batch says otherwise") {
  const std::string dir = converted("tiny-llama");
  SessionOptions o = cpu_session(dir, 2, 0);
  int slots = -1;
  run_on_ranks(o, [&](RankContext& ctx) { slots = ctx.runner->max_batch(); });
  CHECK(slots == kDefaultCpuMaxBatch);
  o.max_batch = 3;
  run_on_ranks(o, [&](RankContext& ctx) { slots = ctx.runner->max_batch(); });
  CHECK(slots == 3);
}

TEST_CASE("a prompt gives the same logits alone and in a batch") {
  const nlohmann::json ref = reference("tiny-llama");
  const auto prompts = ref["prompts"].get<std::vector<std::vector<int32_t>>>();
  const std::string dir = converted("tiny-llama");
  for (int tp : {1, 2}) {
    const auto batched = batch_logits(dir, tp, prompts);
    for (size_t i = 0; i < prompts.size(); ++i) {
      const auto alone = batch_logits(dir, tp, {prompts[i]});
      CHECK(max_abs_diff(alone[0], batched[i]) <= 1e-6);
    }
  }
}

/// Prompts sharing a 20-token prefix (suffixes of 1, 3 and 6 tokens that start differently).
std::vector<std::vector<int32_t>> shared_prefix_prompts() {
  std::vector<int32_t> prefix;
  for (int i = 0; i < 20; ++i) prefix.push_back(3 + (i * 37) % 400);
  std::vector<std::vector<int32_t>> prompts;
  for (const std::vector<int32_t>& suffix : std::vector<std::vector<int32_t>>{{17}, {29, 5, 88}, {41, 9, 9, 301, 7, 2}}) {
    prompts.push_back(prefix);
    prompts.back().insert(prompts.back().end(), suffix.begin(), suffix.end());
  }
  return prompts;
}

TEST_CASE("a shared prompt prefix, read from its own kv_cache slot, gives the unshared logits and greedy ids") {
  const auto prompts = shared_prefix_prompts();
  const int prefix_len = 20;
  // GPT-Neo and Mistral: local windows (4, 6) shorter than the prefix and reaching across its end.
  for (const std::string name : {"tiny-llama", "tiny-gpt-neo", "tiny-mistral-swa"}) {
    const std::string dir = converted(name);
    for (const int tp : {1, 2}) {
      CAPTURE(name);
      CAPTURE(tp);
      const auto unshared = batch_logits(dir, tp, prompts);
      std::vector<std::vector<float>> shared;
      run_on_ranks(cpu_session(dir, tp, 4), [&](RankContext& ctx) {
        const int64_t V = ctx.runner->config().vocab_size;
        ctx.runner->forward({{0, 0, std::vector<int32_t>(prompts[0].begin(), prompts[0].begin() + prefix_len)}}, nullptr,
                            nullptr);
        std::vector<SeqChunk> members;
        for (size_t i = 0; i < prompts.size(); ++i) {
          SeqChunk c{static_cast<int>(i) + 1, prefix_len, std::vector<int32_t>(prompts[i].begin() + prefix_len, prompts[i].end())};
          c.prefix_slot = 0;
          c.prefix_len = prefix_len;
          members.push_back(c);
        }
        std::vector<float> logits(members.size() * V);
        ctx.runner->forward(members, logits.data(), nullptr);
        if (ctx.is_output_rank())
          for (size_t i = 0; i < members.size(); ++i) shared.emplace_back(logits.begin() + i * V, logits.begin() + (i + 1) * V);
      });
      REQUIRE(shared.size() == prompts.size());
      for (size_t i = 0; i < prompts.size(); ++i) CHECK(max_abs_diff(shared[i], unshared[i]) <= 1e-5);
      // generate() finds the prefix itself (4 slots: the prefix's + 3) and decodes over it.
      CHECK(greedy(dir, tp, prompts, 8, 4) == greedy(dir, tp, prompts, 8, 1));
    }
  }
}

TEST_CASE("prompt log-probabilities: every position's log_softmax equals the last-position logits of its prefix; the last one transformers'") {
  const nlohmann::json ref = reference("tiny-llama");
  const auto prompts = ref["prompts"].get<std::vector<std::vector<int32_t>>>();
  const auto hf_logits = ref["last_logits"].get<std::vector<std::vector<float>>>();
  const auto hf_greedy = ref["greedy"].get<std::vector<std::vector<int32_t>>>();
  const std::string dir = converted("tiny-llama");
  // Each prompt + transformers' first greedy token: the last score is log_softmax(HF last logits)[token].
  std::vector<std::vector<int32_t>> seqs;
  for (size_t i = 0; i < prompts.size(); ++i) {
    seqs.push_back(prompts[i]);
    seqs.back().push_back(hf_greedy[i][0]);
  }
  for (const int tp : {1, 2, 4}) {
    CAPTURE(tp);
    std::vector<SequenceScores> scores;
    std::vector<std::vector<std::vector<float>>> prefix_logits(seqs.size());
    run_on_ranks(cpu_session(dir, tp, 2), [&](RankContext& ctx) {  // 2 slots for 4 sequences: slots reused
      const auto got = score_sequences(*ctx.runner, seqs, 5);
      const int64_t V = ctx.runner->config().vocab_size;
      for (size_t s = 0; s < seqs.size(); ++s)
        for (size_t n = 1; n < seqs[s].size(); ++n) {
          std::vector<float> logits(V);
          ctx.runner->forward({{0, 0, std::vector<int32_t>(seqs[s].begin(), seqs[s].begin() + n)}}, logits.data(), nullptr);
          if (ctx.is_output_rank()) prefix_logits[s].push_back(logits);
        }
      if (ctx.is_output_rank()) scores = got;
    });
    REQUIRE(scores.size() == seqs.size());
    for (size_t s = 0; s < seqs.size(); ++s) {
      CAPTURE(s);
      REQUIRE(scores[s].tokens.size() == seqs[s].size() - 1);
      for (size_t i = 0; i + 1 < seqs[s].size(); ++i) {
        const TokenLogprob want = row_logprob(prefix_logits[s][i].data(), 1000, seqs[s][i + 1], 5);
        const TokenLogprob& got = scores[s].tokens[i];
        CHECK(got.token == seqs[s][i + 1]);
        CHECK(std::abs(got.logprob - want.logprob) <= 1e-5);
        REQUIRE(got.top.size() == 5);
        CHECK(got.top[0].first == want.top[0].first);
        CHECK(got.top[0].second >= got.top[4].second);
        CHECK(scores[s].greedy[i] == (got.top[0].first == seqs[s][i + 1]));
      }
      const TokenLogprob hf = row_logprob(hf_logits[s].data(), 1000, seqs[s].back(), 0);
      CHECK(std::abs(scores[s].tokens.back().logprob - hf.logprob) <= 1e-4);
      CHECK(scores[s].greedy.back());  // the token is transformers' greedy choice
    }
  }
}

TEST_CASE("generate(): log-probabilities of generated and prompt tokens equal the scores of the whole sequence") {
  const std::string dir = converted("tiny-llama");
  auto prompts = shared_prefix_prompts();  // three prompts with a common 20-token prefix
  for (const int tp : {1, 2}) {
    CAPTURE(tp);
    std::vector<GenerationResult> res;
    std::vector<SequenceScores> scores;
    testing::FakeTokenizer fake;
    run_on_ranks(cpu_session(dir, tp, 4), [&](RankContext& ctx) {
      std::vector<GenerationRequest> reqs;
      for (size_t i = 0; i < prompts.size(); ++i) {
        SamplingParams p;
        p.max_new_tokens = 5;
        p.ignore_eos = true;
        p.logprobs = 3;
        if (i == 1) p.prompt_logprobs = 2;  // prefilled whole, next to members of a shared prefix
        reqs.push_back({std::to_string(i), prompts[i], p});
      }
      SamplingParams only_prompt;
      only_prompt.max_new_tokens = 0;  // lm-eval loglikelihood: the prompt's scores, nothing generated
      only_prompt.prompt_logprobs = 0;
      reqs.push_back({"score", prompts[2], only_prompt});
      auto got = generate(*ctx.runner, fake, reqs);
      std::vector<std::vector<int32_t>> seqs;
      for (size_t i = 0; i < prompts.size(); ++i) {
        seqs.push_back(prompts[i]);
        seqs.back().insert(seqs.back().end(), got[i].output_ids.begin(), got[i].output_ids.end());
      }
      auto sc = score_sequences(*ctx.runner, seqs, 3);
      if (ctx.is_output_rank()) {
        res = got;
        scores = sc;
      }
    });
    REQUIRE(res.size() == 4);
    for (size_t i = 0; i < prompts.size(); ++i) {
      CAPTURE(i);
      REQUIRE(res[i].logprobs.size() == 5);
      for (size_t k = 0; k < 5; ++k) {
        const TokenLogprob& want = scores[i].tokens[prompts[i].size() - 1 + k];
        CHECK(res[i].logprobs[k].token == res[i].output_ids[k]);
        CHECK(std::abs(res[i].logprobs[k].logprob - want.logprob) <= 1e-5);
        REQUIRE(res[i].logprobs[k].top.size() == 3);
        CHECK(res[i].logprobs[k].top[0].first == res[i].output_ids[k]);  // greedy: the top token
      }
    }
    REQUIRE(res[1].prompt_logprobs.size() == prompts[1].size() - 1);
    for (size_t k = 0; k + 1 < prompts[1].size(); ++k) {
      CHECK(std::abs(res[1].prompt_logprobs[k].logprob - scores[1].tokens[k].logprob) <= 1e-5);
      CHECK(res[1].prompt_logprobs[k].top.size() == 2);
    }
    CHECK(res[3].output_ids.empty());
    CHECK(res[3].finish_reason == "length");
    REQUIRE(res[3].prompt_logprobs.size() == prompts[2].size() - 1);
    for (size_t k = 0; k + 1 < prompts[2].size(); ++k)
      CHECK(std::abs(res[3].prompt_logprobs[k].logprob - scores[2].tokens[k].logprob) <= 1e-5);
    CHECK(res[0].prompt_logprobs.empty());
  }
}

TEST_CASE("stories260K: greedy 200 tokens from BOS reproduce llama2.c's published run at tp 1, 2, 4") {
  std::ifstream f(std::string(TPSHARD_FIXTURES_DIR) + "/stories260K/expected_greedy200_ids.txt");
  REQUIRE(f.good());
  const auto expected = nlohmann::json::parse(f).get<std::vector<int32_t>>();  // BOS + 199 tokens
  REQUIRE(expected.size() == 200);
  const std::string dir = converted("stories260K");
  for (int tp : {1, 2, 4}) {
    CAPTURE(tp);
    const auto out = greedy(dir, tp, {{1}}, 199, 1);
    REQUIRE(out.size() == 1);
    CHECK(out[0] == std::vector<int32_t>(expected.begin() + 1, expected.end()));
  }
}

TEST_CASE("dynamic NTK rope: the default frequencies within max_position_embeddings, transformers' past it") {
  const nlohmann::json ref = reference("tiny-internlm2");
  ModelConfig c;
  c.head_dim = 8;
  c.rotary_ndims = 8;
  c.rope_theta = 10000.0;
  c.max_position_embeddings = 128;
  c.rope_type = RopeType::Dynamic;
  c.rope_factor = 2.0;
  ModelConfig plain = c;
  plain.rope_type = RopeType::Default;
  CHECK(rope_inv_freq(c) == rope_inv_freq(plain));  // what the backends use: sessions stay within 128
  REQUIRE(ref["dynamic_ntk"].size() == 5);
  for (const auto& e : ref["dynamic_ntk"]) {
    const int64_t len = e["seq_len"].get<int64_t>();
    CAPTURE(len);
    const auto hf = e["inv_freq"].get<std::vector<float>>();
    const auto ours = rope_dynamic_ntk_inv_freq(c, len);
    REQUIRE(ours.size() == hf.size());
    for (size_t i = 0; i < hf.size(); ++i) CHECK(std::abs(ours[i] - hf[i]) <= 1e-6f * std::abs(hf[i]));
    if (len <= 128) CHECK(ours == rope_inv_freq(plain));
  }
}
