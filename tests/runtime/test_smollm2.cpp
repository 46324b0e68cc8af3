// test_smollm2.cpp: SmolLM2-135M-Instruct (a real model, 9 heads / 3 KV heads) on the CPU backend at
// tp 3 against tests/fixtures/smollm2/reference.json (transformers, bf16 weights upcast to fp32).
// The weights are not in the repository: set TPSHARD_SMOLLM2_HF_DIR to the checkpoint written by
// scripts/smollm2_to_hf.py to run it; otherwise the test says so and passes without checking.
#include <doctest/doctest.h>

#include <cstdlib>
#include <fstream>

#include <nlohmann/json.hpp>

#include "runtime/generate.h"
#include "runtime/session.h"

using namespace tpshard;

TEST_CASE("SmolLM2-135M-Instruct: 32 greedy tokens of 7 prompts (plain and chat) match transformers at tp 3") {
  const char* hf_dir = std::getenv("TPSHARD_SMOLLM2_HF_DIR");
  if (!hf_dir || !*hf_dir) {
    MESSAGE("skipped: set TPSHARD_SMOLLM2_HF_DIR to the scripts/smollm2_to_hf.py output to run this test");
    return;
  }
  const std::string out = std::string(TPSHARD_TEST_OUT_DIR) + "/smollm2";
  const std::string cmd = std::string(TPSHARD_BIN_DIR) + "/tpshard convert " + hf_dir + " -o " + out +
                          " --tp 3 --force -q >/dev/null";
  REQUIRE(std::system(cmd.c_str()) == 0);
  std::ifstream f(std::string(TPSHARD_FIXTURES_DIR) + "/smollm2/reference.json");
  REQUIRE(f.good());
  const auto ref = nlohmann::json::parse(f);
  std::vector<GenerationRequest> reqs;
  for (const auto& c : ref["prompts"]) {
    SamplingParams p;
    p.max_new_tokens = static_cast<int>(c["greedy_new_ids"].size());
    p.ignore_eos = true;  // the reference does not stop at EOS
    reqs.push_back({c["name"].get<std::string>(), c["prompt_ids"].get<std::vector<int32_t>>(), p});
  }
  SessionOptions o;
  o.model_dir = out;
  o.tp_size = 3;
  o.device = Device::Cpu;
  o.max_batch = static_cast<int>(reqs.size());
  o.max_seq_len = 256;
  o.quiet = true;
  std::vector<GenerationResult> res;
  run_on_ranks(o, [&](RankContext& ctx) {
    REQUIRE(ctx.tokenizer != nullptr);
    auto r = generate(*ctx.runner, *ctx.tokenizer, reqs);
    if (ctx.is_output_rank()) res = r;
  });
  REQUIRE(res.size() == reqs.size());
  size_t i = 0;
  for (const auto& c : ref["prompts"]) {
    CAPTURE(c["name"].get<std::string>());
    CHECK(res[i++].output_ids == c["greedy_new_ids"].get<std::vector<int32_t>>());
  }
}
