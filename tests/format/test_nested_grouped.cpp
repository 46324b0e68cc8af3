// test_nested_grouped.cpp: the GroupedQkv spans (InternLM2's wqkv packed per KV group), the multimodal
// nesting rule (model/multimodal.h: nested config, tensor names, the skip line of tpshard convert).
#include <doctest/doctest.h>

#include "format/error.h"
#include "model/model_config.h"
#include "model/multimodal.h"
#include "model/parallel_layout.h"
#include "model/tensor_plan.h"
#include "test_util.h"

using namespace tpshard;
using nlohmann::json;

namespace {

/// A config with 8 heads of head_dim 2 and the given KV heads (InternLM2's names and defaults).
ModelConfig grouped_config(int64_t kv_heads) {
  json j = {{"architectures", {"InternLM2ForCausalLM"}}, {"hidden_size", 16}, {"num_attention_heads", 8},
            {"num_key_value_heads", kv_heads}, {"num_hidden_layers", 1}, {"intermediate_size", 32},
            {"vocab_size", 64}, {"max_position_embeddings", 32}, {"bias", false}};
  return parse_hf_config(j, "c");
}

/// The packed source rows rank tp_rank's spans copy, in output order.
std::vector<int64_t> rows_of(const ModelConfig& c, int tp, int rank) {
  const std::vector<OutputTensor> plan = plan_tensors(c);
  const OutputTensor& qkv = plan.at(2);
  REQUIRE(qkv.transform == Transform::GroupedQkv);
  const RankSlice s = slice_for_rank(qkv, c, make_parallel_layout(c, tp), rank);
  std::vector<int64_t> rows;
  for (const Span& sp : s.spans) {
    CHECK(sp.source == 0);
    CHECK(sp.col_begin == 0);
    for (int64_t r = sp.row_begin; r < sp.row_begin + sp.rows; ++r) rows.push_back(r);
  }
  CHECK(static_cast<int64_t>(rows.size()) == s.local_shape[0]);
  return rows;
}

/// Rows of query head h, key / value head g in the packed layout (G query heads per group, head_dim 2).
std::vector<int64_t> head_rows(int64_t first) { return {first, first + 1}; }

}  // namespace

TEST_CASE("GroupedQkv: each rank takes its query heads and KV heads from the KV groups, as Q | K | V") {
  // 8 heads, 2 KV heads: G = 4; group g holds rows [12 g, 12 g + 12): q heads 4g..4g+3, then k_g, then v_g.
  const ModelConfig c = grouped_config(2);
  auto q = [](int64_t h) { return head_rows((h / 4) * 12 + (h % 4) * 2); };
  auto k = [](int64_t g) { return head_rows(g * 12 + 8); };
  auto v = [](int64_t g) { return head_rows(g * 12 + 10); };
  auto cat = [](std::initializer_list<std::vector<int64_t>> parts) {
    std::vector<int64_t> out;
    for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
    return out;
  };
  // tp 1: Q of all 8 heads, then K of both groups, then V of both.
  CHECK(rows_of(c, 1, 0) == cat({q(0), q(1), q(2), q(3), q(4), q(5), q(6), q(7), k(0), k(1), v(0), v(1)}));
  // tp 2: one group each.
  CHECK(rows_of(c, 2, 1) == cat({q(4), q(5), q(6), q(7), k(1), v(1)}));
  // tp 4: two query heads each, the KV head of their group replicated on two ranks.
  CHECK(rows_of(c, 4, 1) == cat({q(2), q(3), k(0), v(0)}));
  CHECK(rows_of(c, 4, 2) == cat({q(4), q(5), k(1), v(1)}));
  // tp 8: one query head each.
  CHECK(rows_of(c, 8, 5) == cat({q(5), k(1), v(1)}));
  // MHA (kv_heads = heads): G = 1, per head (q, k, v) like NeoxQkv.
  const ModelConfig mha = grouped_config(8);
  CHECK(rows_of(mha, 2, 1) == cat({head_rows(24), head_rows(30), head_rows(36), head_rows(42),  // q of heads 4..7
                                   head_rows(26), head_rows(32), head_rows(38), head_rows(44),  // k
                                   head_rows(28), head_rows(34), head_rows(40), head_rows(46)}));  // v
  // 1-D bias (bias true): the same rows.
  json j = {{"architectures", {"InternLM2ForCausalLM"}}, {"hidden_size", 16}, {"num_attention_heads", 8},
            {"num_key_value_heads", 2}, {"num_hidden_layers", 1}, {"intermediate_size", 32}, {"vocab_size", 64},
            {"max_position_embeddings", 32}};  // bias defaults to true (InternLM2Config)
  const ModelConfig b = parse_hf_config(j, "c");
  CHECK(b.attention_bias);
  CHECK(b.attention_out_bias);
  const std::vector<OutputTensor> plan = plan_tensors(b);
  CHECK(plan.at(3).sources == std::vector<std::string>{"model.layers.0.attention.wqkv.bias"});
  const RankSlice s = slice_for_rank(plan.at(3), b, make_parallel_layout(b, 4), 2);
  CHECK(s.local_shape == std::vector<int64_t>{8});
  REQUIRE(s.spans.size() == 3);
  CHECK(s.spans[0].row_begin == 12);
  CHECK(s.spans[1].row_begin == 20);
  CHECK(s.spans[2].row_begin == 22);
}

TEST_CASE("multimodal: the nested llm_config / text_config is the language model's config") {
  const json qwen = {{"architectures", {"Qwen2ForCausalLM"}}, {"hidden_size", 64}, {"num_attention_heads", 4},
                     {"num_key_value_heads", 2}, {"num_hidden_layers", 2}, {"intermediate_size", 128},
                     {"vocab_size", 1000}, {"max_position_embeddings", 128}, {"tie_word_embeddings", false}};
  json j = {{"architectures", {"NVLM_D"}}, {"torch_dtype", "bfloat16"}, {"tie_word_embeddings", true},
            {"hidden_size", 3}, {"llm_config", qwen}, {"vision_config", {{"hidden_size", 32}}}};
  ModelConfig c = parse_hf_config(j, "config.json");
  CHECK(c.arch == Arch::Qwen2);
  CHECK(c.architecture == "Qwen2ForCausalLM");
  CHECK(c.multimodal_architecture == "NVLM_D");
  CHECK(c.hidden_size == 64);               // the nested value, not the outer one
  CHECK_FALSE(c.tie_word_embeddings);       // the nested value
  CHECK(c.torch_dtype == "bfloat16");       // the outer dtype, the nested config has none
  j["llm_config"]["torch_dtype"] = "float16";
  CHECK(parse_hf_config(j, "config.json").torch_dtype == "float16");

  // text_config, without architectures (transformers' composite configs): model_type names it.
  json t = qwen;
  t.erase("architectures");
  t["model_type"] = "qwen2";
  json l = {{"architectures", {"SomeVLForConditionalGeneration"}}, {"text_config", t}};
  c = parse_hf_config(l, "config.json");
  CHECK(c.arch == Arch::Qwen2);
  CHECK(c.multimodal_architecture == "SomeVLForConditionalGeneration");
  // the manifest stores the language model (no outer architecture)
  const json m = model_config_to_json(c);
  CHECK(m["architectures"] == json::array({"Qwen2ForCausalLM"}));
  CHECK(model_config_from_json(m, "manifest.json").multimodal_architecture.empty());

  // a nested config that cannot serve is named as such: an unsupported language model, no architecture,
  // not an object
  const auto error_of = [](const json& cfg) -> std::string {
    try {
      parse_hf_config(cfg, "config.json");
    } catch (const Error& e) {
      return e.what();
    }
    return "no error";
  };
  json bad = j;
  bad["llm_config"]["architectures"] = {"PhiForCausalLM"};
  CHECK(error_of(bad) == "config.json: \"llm_config\" holds a PhiForCausalLM language model, which tpshard does not support");
  bad = j;
  bad["llm_config"].erase("architectures");
  CHECK(error_of(bad) == "config.json: \"llm_config\" names no architectures and no model_type");
  bad["llm_config"]["model_type"] = "gptj";
  CHECK(error_of(bad) == "config.json: \"llm_config\" has model_type \"gptj\", which tpshard does not support");
  bad = j;
  bad["llm_config"] = "qwen2";
  CHECK(error_of(bad) == "config.json: \"llm_config\" is string, not an object");
  // an outer architecture without any nested config: the usual error
  bad = j;
  bad.erase("llm_config");
  CHECK(error_of(bad) == "config.json: unsupported architecture \"NVLM_D\"");
  // a declared layer count no model has is refused before any per-layer table is built
  bad = j;
  bad["llm_config"]["num_hidden_layers"] = int64_t(1) << 40;
  CHECK(error_of(bad).find("\"num_hidden_layers\" is 1099511627776, outside the +-2147483647 tpshard accepts") !=
        std::string::npos);
  // errors in the nested config name it
  bad = j;
  bad["llm_config"].erase("vocab_size");
  try {
    parse_hf_config(bad, "config.json");
    FAIL("no error");
  } catch (const Error& e) {
    CHECK_MESSAGE(std::string(e.what()).find("config.json (llm_config)") != std::string::npos, e.what());
  }
}

TEST_CASE("multimodal: tensor names of the common nestings map to the language model's") {
  using multimodal::language_model_tensor;
  CHECK(language_model_tensor("language_model.model.layers.0.self_attn.q_proj.weight") ==
        "model.layers.0.self_attn.q_proj.weight");
  CHECK(language_model_tensor("language_model.lm_head.weight") == "lm_head.weight");
  CHECK(language_model_tensor("language_model.output.weight") == "output.weight");
  CHECK(language_model_tensor("model.language_model.layers.0.mlp.up_proj.weight") == "model.layers.0.mlp.up_proj.weight");
  CHECK(language_model_tensor("model.language_model.embed_tokens.weight") == "model.embed_tokens.weight");
  CHECK(language_model_tensor("lm_head.weight") == "lm_head.weight");
  CHECK(language_model_tensor("vision_model.encoder.layers.0.mlp.fc1.weight").empty());
  CHECK(language_model_tensor("mlp1.1.weight").empty());
  CHECK(language_model_tensor("model.vision_tower.blocks.0.weight").empty());
  CHECK(language_model_tensor("multi_modal_projector.linear_1.weight").empty());
  CHECK(multimodal::skipped_group("vision_model.encoder.layers.0.mlp.fc1.weight") == "vision_model.*");
  CHECK(multimodal::skipped_group("model.vision_tower.blocks.0.weight") == "model.vision_tower.*");
  CHECK(multimodal::skipped_line(123, {"vision_model.*", "mlp1.*"}, "NVLM_D") ==
        "skipped 123 tensors of vision_model.*, mlp1.* (outside the language model of NVLM_D: vision tower and "
        "projector; tpshard runs the language model)");
}

TEST_CASE("tpshard convert of the NVLM-D layout fixture: converts the language model, names the skipped tensors") {
  test::ScratchDir d;
  const std::string log = d / "log.txt";
  REQUIRE(test::run_tpshard(std::string("convert ") + TPSHARD_FIXTURES + "/tiny-nvlm-d -o " + (d / "out") +
                                " --tp 1,2 -q",
                            log) == 0);
  const std::string text = test::read_text(log);
  CHECK_MESSAGE(text.find("tpshard convert: skipped 6 tensors of mlp1.*, vision_model.* (outside the language model "
                          "of NVLM_D: vision tower and projector; tpshard runs the language model)\n") != std::string::npos,
                text);
  const json m = json::parse(test::read_text(d / "out/manifest.json"));
  CHECK(m["model"]["architectures"] == json::array({"Qwen2ForCausalLM"}));
  CHECK(m["model"]["torch_dtype"] == "float32");

  // a plain checkpoint: no such line
  REQUIRE(test::run_tpshard(std::string("convert ") + TPSHARD_FIXTURES + "/tiny-qwen2 -o " + (d / "plain") + " -q", log) == 0);
  CHECK(test::read_text(log).find("skipped") == std::string::npos);
}
