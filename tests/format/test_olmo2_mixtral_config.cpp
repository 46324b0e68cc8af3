// test_olmo2_mixtral_config.cpp: the published configs of the two families, parsed, planned and given
// to `tpshard plan`. Mixtral-8x7B-v0.1: tests/fixtures/configs/mixtral-8x7b-v0.1.config.json. OLMo-2-1124-7B:
// its config.json's fields written out here (the values of allenai/OLMo-2-1124-7B's published config.json,
// as NVIDIA Megatron-Bridge's OLMo 2 tests mirror them; the file itself was not reachable to copy).
#include <doctest/doctest.h>

#include <fstream>

#include "format/error.h"
#include "model/memory_plan.h"
#include "model/model_config.h"
#include "model/parallel_layout.h"
#include "model/tensor_plan.h"
#include "published_configs.h"
#include "test_util.h"

using namespace tpshard;
using namespace tpshard::test;
using nlohmann::json;

namespace {

json mixtral_8x7b() {
  std::ifstream f(std::string(TPSHARD_FIXTURES) + "/configs/mixtral-8x7b-v0.1.config.json");
  REQUIRE(f.good());
  return json::parse(f);
}

std::string tpshard_plan(const json& config, const std::string& args) {
  ScratchDir d;
  {
    std::ofstream f(d / "config.json");
    f << config.dump(2);
  }
  const std::string log = d / "log.txt";
  const int rc = run_tpshard("plan " + (d / "config.json") + " " + args, log);
  return std::to_string(rc) + "\n" + read_text(log);
}

}  // namespace

TEST_CASE("Mixtral-8x7B-v0.1 config: 8 experts, top 2, GQA 32/8, no sliding window; manifest round trip") {
  const ModelConfig c = parse_hf_config(mixtral_8x7b(), "mixtral");
  CHECK(c.arch == Arch::Mixtral);
  CHECK(c.num_local_experts == 8);
  CHECK(c.num_experts_per_tok == 2);
  CHECK(c.intermediate_size == 14336);
  CHECK(c.num_key_value_heads == 8);
  CHECK(c.head_dim == 128);
  CHECK(c.rope_theta == 1e6);
  CHECK(c.norm_eps == 1e-5);
  CHECK(c.layer_windows.empty());  // sliding_window null
  CHECK(c.pre_norms);
  CHECK_FALSE(c.post_norms);
  CHECK_FALSE(c.tie_word_embeddings);
  const ModelConfig back = model_config_from_json(model_config_to_json(c), "manifest.json");
  CHECK(back.num_local_experts == 8);
  CHECK(back.num_experts_per_tok == 2);
  // a dense model's manifest has no expert fields
  CHECK_FALSE(model_config_to_json(parse_hf_config(olmo2_7b(), "olmo2")).contains("num_local_experts"));

  json j = mixtral_8x7b();
  j["sliding_window"] = 4096;  // v0.1's early configs: every layer
  CHECK(parse_hf_config(j, "swa").layer_windows == std::vector<int64_t>(32, 4096));
  j["num_experts_per_tok"] = 9;
  CHECK_THROWS_WITH_AS(parse_hf_config(j, "config.json"),
                       doctest::Contains("config.json: num_experts_per_tok 9 is outside 1..num_local_experts 8"), Error);
  j["num_experts_per_tok"] = 2;
  j["num_local_experts"] = 0;
  CHECK_THROWS_WITH_AS(parse_hf_config(j, "config.json"), doctest::Contains("num_local_experts 0 is outside 1..1024"), Error);
}

TEST_CASE("Mixtral-8x7B tensor plan and per-rank weights at tp 2: router replicated, every expert split like a dense MLP") {
  const ModelConfig c = parse_hf_config(mixtral_8x7b(), "mixtral");
  const std::vector<OutputTensor> plan = plan_tensors(c);
  CHECK(plan.size() == 1 + 32 * 7 + 2);
  const OutputTensor& gate_up = plan[1 + 5];
  CHECK(gate_up.name == "blk.0.ffn_experts_gate_up.weight");
  REQUIRE(gate_up.sources.size() == 16);
  CHECK(gate_up.sources[0] == "model.layers.0.block_sparse_moe.experts.0.w1.weight");
  CHECK(gate_up.sources[1] == "model.layers.0.block_sparse_moe.experts.0.w3.weight");
  CHECK(plan[1 + 4].sources == std::vector<std::string>{"model.layers.0.block_sparse_moe.gate.weight"});
  const ParallelLayout layout = make_parallel_layout(c, 2);
  const RankSlice s = slice_for_rank(gate_up, c, layout, 1);
  CHECK(s.local_shape == std::vector<int64_t>{8 * 2 * 7168, 4096});
  CHECK(s.global_shape == std::vector<int64_t>{8 * 2 * 14336, 4096});
  CHECK(s.spans[2].source == 2);  // expert 1's w1, from rank 1's first column
  CHECK(s.spans[2].row_begin == 7168);
  const RankSlice d = slice_for_rank(plan[1 + 6], c, layout, 1);
  CHECK(d.local_shape == std::vector<int64_t>{8 * 4096, 7168});
  CHECK(d.spans[7].col_begin == 7168);
  // bf16 per rank, 4096-aligned tensors: token_embd and output 16000 x 4096 x 2 = 131,072,000 each; per
  // layer attn_norm and ffn_norm 8,192 each, qkv (16 + 2 x 4) x 128 x 4096 x 2 = 25,165,824, o 4096 x 2048 x
  // 2 = 16,777,216, router 8 x 4096 x 2 = 65,536, experts' gate_up 8 x 2 x 7168 x 4096 x 2 = 939,524,096 and
  // down 8 x 4096 x 7168 x 2 = 469,762,048: 1,451,311,104; output_norm 8,192.
  const uint64_t weights = 2ull * 131072000ull + 32ull * 1451311104ull + 8192ull;
  for (int r = 0; r < 2; ++r) CHECK(planned_weight_bytes(c, layout, 0, r, DType::BF16) == weights);
  CHECK(plan_memory_for_config(c, DType::BF16, 2, 1, 8, 4096).weight_bytes == weights);

  const std::string out = tpshard_plan(mixtral_8x7b(), "--tp 2 --batch 48 --max-seq 2048 --gpu-mem 80");
  CHECK_MESSAGE(out.rfind("0\n", 0) == 0, out);
  CHECK_MESSAGE(out.find("per-GPU memory plan: tp 2") != std::string::npos, out);
  CHECK_MESSAGE(tpshard_plan(mixtral_8x7b(), "--tp 8 --batch 48 --max-seq 2048").rfind("0\n", 0) == 0, "tp 8");
}

TEST_CASE("OLMo-2-1124-7B config: no pre-norms, post-norms, q/k norms over the whole projection; manifest round trip") {
  const ModelConfig c = parse_hf_config(olmo2_7b(), "olmo2");
  CHECK(c.arch == Arch::Olmo2);
  CHECK_FALSE(c.pre_norms);
  CHECK(c.post_norms);
  CHECK(c.qk_norm_across_heads);
  CHECK_FALSE(c.qk_norm);
  CHECK(c.num_local_experts == 0);
  CHECK(c.norm_eps == 1e-6);
  CHECK(c.rope_theta == 5e5);
  CHECK(c.head_dim == 128);
  CHECK(c.bos_token_ids.empty());
  const ModelConfig back = model_config_from_json(model_config_to_json(c), "manifest.json");
  CHECK_FALSE(back.pre_norms);
  CHECK(back.post_norms);
  CHECK(back.qk_norm_across_heads);
  json m = model_config_to_json(c);
  m["pre_norms"] = true;  // an edit the architecture contradicts
  CHECK_THROWS_WITH_AS(model_config_from_json(m, "manifest.json"), doctest::Contains("\"pre_norms\" is true"), Error);
  // defaults (Olmo2Config)
  const ModelConfig d = parse_hf_config({{"architectures", {"Olmo2ForCausalLM"}}, {"hidden_size", 64}, {"num_hidden_layers", 2},
                                         {"num_attention_heads", 4}, {"vocab_size", 100}, {"max_position_embeddings", 128}},
                                        "defaults");
  CHECK(d.intermediate_size == 11008);
  CHECK(d.norm_eps == 1e-5);
  CHECK(d.rope_theta == 10000.0);
  CHECK_FALSE(d.tie_word_embeddings);
}

TEST_CASE("OLMo-2-1124-7B tensor plan and per-rank weights at tp 4: whole q/k norm weights replicated, no pre-norms") {
  const ModelConfig c = parse_hf_config(olmo2_7b(), "olmo2");
  const std::vector<OutputTensor> plan = plan_tensors(c);
  CHECK(plan.size() == 1 + 32 * 8 + 2);
  CHECK(plan[1].name == "blk.0.attn_qkv.weight");  // no attn_norm
  CHECK(plan[2].name == "blk.0.attn_q_norm.weight");
  CHECK(plan[2].source_shapes == std::vector<std::vector<int64_t>>{{4096}});
  const ParallelLayout layout = make_parallel_layout(c, 4);
  CHECK(layout.tp(1).mlp_columns.size() == 2752);
  for (int r = 0; r < 4; ++r) CHECK(layout.owned_kv_heads(r) == layout.tp(r).kv_heads);  // MHA: none shared
  // bf16 per rank: token_embd and output 25088 x 4096 x 2 = 205,520,896 each; per layer qkv (8 + 2 x 8) x 128
  // x 4096 x 2 = 25,165,824, q_norm, k_norm, the two post-norms 8,192 each, o 4096 x 1024 x 2 = 8,388,608,
  // gate_up 2 x 2752 x 4096 x 2 = 45,088,768, down 4096 x 2752 x 2 = 22,544,384: 101,220,352; output_norm 8,192.
  const uint64_t weights = 2ull * 205520896ull + 32ull * 101220352ull + 8192ull;
  for (int r = 0; r < 4; ++r) CHECK(planned_weight_bytes(c, layout, 0, r, DType::BF16) == weights);
  const std::string out = tpshard_plan(olmo2_7b(), "--tp 4 --batch 48 --max-seq 2048 --gpu-mem 80");
  CHECK_MESSAGE(out.rfind("0\n", 0) == 0, out);
  CHECK_MESSAGE(out.find("per-GPU memory plan: tp 4") != std::string::npos, out);
  CHECK_MESSAGE(tpshard_plan(olmo2_7b(), "--tp 3 --batch 48 --max-seq 2048").rfind("0\n", 0) == 0, "tp 3");
}

TEST_CASE("owned_kv_heads: replicated or shared KV heads count once, on the lowest rank holding them") {
  json j = olmo2_7b();
  j["num_key_value_heads"] = 2;
  const ModelConfig c = parse_hf_config(j, "gqa");
  for (int tp : {1, 2, 3, 4, 5, 8}) {
    CAPTURE(tp);
    const ParallelLayout L = make_parallel_layout(c, tp);
    int64_t next = 0;
    for (int r = 0; r < tp; ++r) {
      const Range o = L.owned_kv_heads(r);
      if (o.size() == 0) continue;
      CHECK(o.begin == next);
      CHECK(o.end <= L.tp(r).kv_heads.end);
      next = o.end;
    }
    CHECK(next == 2);
  }
}
