// test_gemma2_config.cpp: Gemma2ForCausalLM's config.json (the fields of google/gemma-2-9b's published
// config, written out here; Gemma2Config's defaults for the rest), its refusals (one error naming the
// key), the manifest round trip of the fields Gemma 2 adds, and `tpshard plan` of the 9B shape at tp 4.
#include <doctest/doctest.h>

#include <cmath>
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

std::string error_of(const json& j) {
  try {
    parse_hf_config(j, "config.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("Gemma-2-9B config: soft-caps, (1 + w) norms, post-norms, scaled embedding, local / global layers, tied") {
  const ModelConfig c = parse_hf_config(gemma2_9b(), "gemma2");
  CHECK(c.arch == Arch::Gemma2);
  CHECK(c.head_dim == 256);
  CHECK(c.rotary_ndims == 256);
  CHECK(c.num_key_value_heads == 8);
  CHECK(c.norm == NormKind::RmsNorm);
  CHECK(c.norm_eps == 1e-6);
  CHECK(c.norm_weight_offset == 1.0);
  CHECK(c.post_norms);
  CHECK(c.gated_mlp);
  CHECK(c.hidden_act == Activation::GeluTanh);
  CHECK(c.attention_scale == 1.0 / 16.0);  // 256^-0.5
  CHECK(c.attn_logit_softcapping == 50.0);
  CHECK(c.final_logit_softcapping == 30.0);
  CHECK(c.embedding_scale == std::sqrt(3584.0));
  CHECK(c.tie_word_embeddings);
  CHECK_FALSE(c.attention_bias);
  REQUIRE(c.layer_windows.size() == 42);
  for (size_t l = 0; l < 42; ++l) CHECK(c.layer_windows[l] == (l % 2 == 0 ? 4096 : 0));  // layer 0 local
  CHECK(c.sliding_window == 4096);

  // the manifest keeps what config.json said, and reads it back the same
  const ModelConfig back = model_config_from_json(model_config_to_json(c), "manifest.json");
  CHECK(back.attn_logit_softcapping == 50.0);
  CHECK(back.final_logit_softcapping == 30.0);
  CHECK(back.attention_scale == c.attention_scale);
  CHECK(back.embedding_scale == c.embedding_scale);
  CHECK(back.norm_weight_offset == 1.0);
  CHECK(back.post_norms);
  CHECK(back.hidden_act == Activation::GeluTanh);
  CHECK(back.layer_windows == c.layer_windows);
}

TEST_CASE("Gemma 2 config defaults (Gemma2Config) and null fields: no soft-cap, no window, layer_types given") {
  json j = {{"architectures", {"Gemma2ForCausalLM"}}, {"hidden_size", 64}, {"num_hidden_layers", 3},
            {"num_attention_heads", 4}, {"vocab_size", 100}, {"max_position_embeddings", 8192}};
  ModelConfig c = parse_hf_config(j, "defaults");
  CHECK(c.head_dim == 256);
  CHECK(c.intermediate_size == 9216);
  CHECK(c.num_key_value_heads == 4);
  CHECK(c.attention_scale == 1.0 / 16.0);
  CHECK(c.attn_logit_softcapping == 50.0);
  CHECK(c.final_logit_softcapping == 30.0);
  CHECK(c.hidden_act == Activation::GeluTanh);
  CHECK(c.tie_word_embeddings);
  CHECK(c.layer_windows == std::vector<int64_t>{4096, 0, 4096});
  CHECK(c.embedding_scale == 8.0);

  j["attn_logit_softcapping"] = nullptr;
  j["final_logit_softcapping"] = nullptr;
  j["sliding_window"] = nullptr;
  j["query_pre_attn_scalar"] = 144;  // Gemma-2-27B's hidden / heads
  j["hidden_act"] = "gelu";          // not read: Gemma2MLP uses hidden_activation
  c = parse_hf_config(j, "nulls");
  CHECK(c.attn_logit_softcapping == 0.0);
  CHECK(c.final_logit_softcapping == 0.0);
  CHECK(c.layer_windows.empty());
  CHECK(c.attention_scale == 1.0 / 12.0);
  CHECK(c.hidden_act == Activation::GeluTanh);
  const ModelConfig back = model_config_from_json(model_config_to_json(c), "manifest.json");
  CHECK(back.attn_logit_softcapping == 0.0);
  CHECK(back.final_logit_softcapping == 0.0);
  CHECK(back.attention_scale == 1.0 / 12.0);

  j["sliding_window"] = 2;
  j["layer_types"] = {"full_attention", "sliding_attention", "sliding_attention"};
  c = parse_hf_config(j, "types");
  CHECK(c.layer_windows == std::vector<int64_t>{0, 2, 2});
}

TEST_CASE("Gemma 2 config errors name the key: a soft-cap of 0, negative or not a number, an unknown activation") {
  const std::pair<std::pair<const char*, json>, const char*> bad[] = {
      {{"attn_logit_softcapping", 0.0}, "attn_logit_softcapping must be a positive number or null"},
      {{"attn_logit_softcapping", -50.0}, "attn_logit_softcapping must be a positive number or null"},
      {{"final_logit_softcapping", 0}, "final_logit_softcapping must be a positive number or null"},
      {{"final_logit_softcapping", "30"}, "field \"final_logit_softcapping\" must be a number"},
      {{"hidden_activation", "swiglu"}, "unsupported hidden_activation \"swiglu\""},
      {{"query_pre_attn_scalar", 0}, "query_pre_attn_scalar must be positive"},
      {{"use_bidirectional_attention", true}, "use_bidirectional_attention is true"},
      {{"layer_types", json::array({"full_attention"})}, "layer_types is not a list of 42 entries"},
  };
  for (const auto& [field, message] : bad) {
    json j = gemma2_9b();
    j[field.first] = field.second;
    const std::string e = error_of(j);
    CHECK_MESSAGE(e.find(message) != std::string::npos, field.first << ": " << e);
  }
  // a manifest edited to another soft-cap than its architecture's config gives is refused
  json m = model_config_to_json(parse_hf_config(gemma2_9b(), "gemma2"));
  m["post_norms"] = false;
  CHECK_THROWS_WITH_AS(model_config_from_json(m, "manifest.json"), doctest::Contains("\"post_norms\" is false"), Error);
  json llama = model_config_to_json(parse_hf_config(
      {{"architectures", {"LlamaForCausalLM"}}, {"hidden_size", 64}, {"num_hidden_layers", 2}, {"num_attention_heads", 4},
       {"vocab_size", 100}, {"max_position_embeddings", 128}, {"intermediate_size", 128}},
      "llama"));
  llama["final_logit_softcapping"] = 30.0;  // Llama has none: an edit, refused
  CHECK_THROWS_WITH_AS(model_config_from_json(llama, "manifest.json"), doctest::Contains("\"final_logit_softcapping\" is 30.0"),
                       Error);
}

TEST_CASE("Gemma-2-9B tensor plan and memory plan at tp 4: per-rank weights, the four norms, KV heads 2 per rank") {
  const ModelConfig c = parse_hf_config(gemma2_9b(), "gemma2");
  const std::vector<OutputTensor> plan = plan_tensors(c);
  CHECK(plan.size() == 1 + 42 * 8 + 1);  // token_embd, 8 per layer, output_norm; tied: no output
  CHECK(plan[1 + 3].name == "blk.0.attn_post_norm.weight");
  CHECK(plan[1 + 3].sources == std::vector<std::string>{"model.layers.0.post_attention_layernorm.weight"});
  CHECK(plan[1 + 4].sources == std::vector<std::string>{"model.layers.0.pre_feedforward_layernorm.weight"});
  CHECK(plan[1 + 7].name == "blk.0.ffn_post_norm.weight");

  const ParallelLayout layout = make_parallel_layout(c, 4);
  for (int r = 0; r < 4; ++r) {
    CHECK(layout.tp(r).heads.size() == 4);
    CHECK(layout.tp(r).kv_heads.size() == 2);
    CHECK(layout.tp(r).mlp_columns.size() == 3584);
    CHECK(layout.tp(r).vocab_rows.size() == 64000);
  }
  // bf16 per rank, each tensor 4096-aligned: token_embd 64000 x 3584 x 2 = 458,752,000; per layer the 4
  // norms (7,168 -> 8,192 each), qkv (4 + 2 x 2) x 256 x 3584 x 2 = 14,680,064, o 3584 x 1024 x 2 =
  // 7,340,032, gate_up 7168 x 3584 x 2 = 51,380,224, down 3584 x 3584 x 2 = 25,690,112: 99,123,200;
  // output_norm 8,192.
  const uint64_t weights = 458752000ull + 42ull * 99123200ull + 8192ull;
  for (int r = 0; r < 4; ++r) CHECK(planned_weight_bytes(c, layout, 0, r, DType::BF16) == weights);
  // kv_cache at batch 8, max_seq 8192: local layers keep min(8192, 2 x 4096) positions, as global ones;
  // 2 (K, V) x 9 slots x 42 layers x 8192 x 2 KV heads x 256 x 2 bytes
  const MemoryPlan p = plan_memory_for_config(c, DType::BF16, 4, 1, 8, 8192);
  CHECK(p.weight_bytes == weights);
  CHECK(p.kv_cache_bytes == 2ull * 9 * 42 * 8192 * 2 * 256 * 2);
  // at max_seq 4096 the local layers' ring is the whole sequence too; at 2048 every layer keeps 2048
  CHECK(plan_memory_for_config(c, DType::BF16, 4, 1, 8, 2048).kv_cache_bytes == 2ull * 9 * 42 * 2048 * 2 * 256 * 2);
}

TEST_CASE("tpshard plan of a Gemma-2-9B config.json at tp 4 and tp 3 (uneven)") {
  ScratchDir d;
  {
    std::ofstream f(d / "config.json");
    f << gemma2_9b().dump(2);
  }
  const std::string log = d / "log.txt";
  REQUIRE(run_tpshard("plan " + (d / "config.json") + " --tp 4 --batch 8 --max-seq 8192 --gpu-mem 80", log) == 0);
  const std::string out = read_text(log);
  CHECK_MESSAGE(out.find("per-GPU memory plan: tp 4") != std::string::npos, out);
  REQUIRE(run_tpshard("plan " + (d / "config.json") + " --tp 3 --batch 8 --max-seq 8192", log) == 0);
  CHECK(run_tpshard("plan " + (d / "config.json") + " --tp 17 --batch 8 --max-seq 8192", log) == 1);
  CHECK(read_text(log).find("tp_size 17 is larger than num_attention_heads 16") != std::string::npos);
}
