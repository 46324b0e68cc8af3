// test_model_config.cpp: parse_hf_config on real config.json files (tests/fixtures/configs) and on
// hand-written old/new spellings; make_parallel_layout divisibility, KV replication and vocab padding.
#include <doctest/doctest.h>

#include <cmath>
#include <fstream>

#include "format/error.h"
#include "model/model_config.h"
#include "model/parallel_layout.h"

using namespace tpshard;
using nlohmann::json;

static json load(const std::string& name) {
  std::ifstream f(std::string(TPSHARD_FIXTURES) + "/configs/" + name);
  REQUIRE(f.good());
  return json::parse(f);
}

static std::string error_of(const json& j) {
  try {
    parse_hf_config(j, "config.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST_CASE("RedPajama-INCITE-7B (GPT-NeoX, old spellings)") {
  const ModelConfig c = parse_hf_config(load("redpajama-incite-7b-base.config.json"), "rp");
  CHECK(c.arch == Arch::GptNeoX);
  CHECK(c.hidden_size == 4096);
  CHECK(c.num_attention_heads == 32);
  CHECK(c.num_key_value_heads == 32);
  CHECK(c.head_dim == 128);
  CHECK(c.rotary_ndims == 128);  // rotary_pct 1.0
  CHECK(c.rope_theta == 10000.0);
  CHECK_FALSE(c.use_parallel_residual);
  CHECK(c.norm == NormKind::LayerNorm);
  CHECK(c.hidden_act == Activation::Gelu);
  CHECK(c.attention_bias);
  CHECK(c.mlp_bias);
  CHECK_FALSE(c.gated_mlp);
  CHECK(c.vocab_size == 50432);
  CHECK(c.torch_dtype == "float16");
  CHECK(c.eos_token_ids == std::vector<int64_t>{0});
}

TEST_CASE("Qwen2.5-Math-72B (Qwen2: q/k/v bias, GQA 64/8)") {
  const ModelConfig c = parse_hf_config(load("qwen2.5-math-72b-instruct.config.json"), "qwen");
  CHECK(c.arch == Arch::Qwen2);
  CHECK(c.attention_bias);
  CHECK_FALSE(c.attention_out_bias);
  CHECK(c.num_key_value_heads == 8);
  CHECK(c.head_dim == 128);
  CHECK(c.norm_eps == 1e-6);
  CHECK(c.intermediate_size == 29568);
  CHECK(c.sliding_window == 0);  // use_sliding_window false
  CHECK(c.torch_dtype == "bfloat16");
  const ParallelLayout l8 = make_parallel_layout(c, 8);
  CHECK(l8.tp(7).heads == Range{56, 64});
  CHECK(l8.tp(7).kv_heads == Range{7, 8});
  CHECK_FALSE(l8.kv_heads_replicated);
  CHECK(l8.tp(1).mlp_columns == Range{3696, 7392});
  CHECK(l8.vocab_size_padded == 152064);
  CHECK(l8.tp(7).vocab_rows == Range{7 * 19008, 152064});
}

TEST_CASE("SmolLM2-135M (new 'dtype' key, tied, 9 heads / 3 KV heads)") {
  const ModelConfig c = parse_hf_config(load("smollm2-135m.config.json"), "smol");
  CHECK(c.tie_word_embeddings);
  CHECK(c.torch_dtype == "bfloat16");
  CHECK(c.head_dim == 64);
  CHECK(c.rope_theta == 100000.0);
  CHECK(c.rope_type == RopeType::Default);
  // tp 2 is uneven: heads 5 / 4, KV group 1 (heads 3..5) straddles the ranks and is held by both.
  const ParallelLayout l2 = make_parallel_layout(c, 2);
  CHECK(l2.tp(0).heads == Range{0, 5});
  CHECK(l2.tp(1).heads == Range{5, 9});
  CHECK(l2.tp(0).kv_heads == Range{0, 2});
  CHECK(l2.tp(1).kv_heads == Range{1, 3});
  CHECK(l2.kv_heads_replicated);
  CHECK(l2.tp(0).mlp_columns == Range{0, 768});
  // tp 10 > 9 heads is refused, naming the largest tp.
  try {
    make_parallel_layout(c, 10);
    FAIL("tp 10 must be refused");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("tp_size 10 is larger than num_attention_heads 9") != std::string::npos);
    CHECK(e.hint() == "use a tp_size between 1 and 9, the largest this model accepts");
  }
  const ParallelLayout l3 = make_parallel_layout(c, 3);
  CHECK(l3.tp(1).heads == Range{3, 6});
  CHECK(l3.tp(1).kv_heads.size() == 1);
  CHECK_FALSE(l3.kv_heads_replicated);
  CHECK(l3.tp(2).kv_heads.begin == 2);
  CHECK(l3.tp(2).mlp_columns == Range{1024, 1536});
  CHECK(l3.vocab_size_padded == 49152);
  // tp 9: one head each, every KV head on 3 ranks; 1536 columns: units of 64 would make the widest
  // rank 192, units of 16 give 11 or 10 units (176 / 160 columns), as narrow as units of 8.
  const ParallelLayout l9 = make_parallel_layout(c, 9);
  CHECK(l9.tp(4).kv_heads == Range{1, 2});
  CHECK(mlp_column_unit(1536, 9) == 16);
  CHECK(l9.tp(0).mlp_columns == Range{0, 176});
  CHECK(l9.tp(8).mlp_columns == Range{1376, 1536});
}

TEST_CASE("TinyLlama and Mistral") {
  const ModelConfig t = parse_hf_config(load("tinyllama-1.1b-chat-v1.0.config.json"), "tl");
  CHECK(t.torch_dtype == "float32");  // "dtype" key (transformers >= 4.56)
  CHECK(t.num_key_value_heads == 4);
  CHECK(t.rotary_ndims == 64);
  const ParallelLayout l8 = make_parallel_layout(t, 8);
  CHECK(l8.kv_heads_replicated);
  CHECK(l8.tp(5).kv_heads == Range{2, 3});
  const ModelConfig m = parse_hf_config(load("mistral-7b-v0.1.config.json"), "mi");
  CHECK(m.architecture == "MistralForCausalLM");
  CHECK(m.sliding_window == 4096);
  CHECK(m.layer_windows == std::vector<int64_t>(32, 4096));  // every layer
  CHECK_FALSE(m.attention_bias);
}

static json neox_base() {
  return json{{"architectures", {"GPTNeoXForCausalLM"}}, {"model_type", "gpt_neox"}, {"hidden_size", 64},
              {"num_hidden_layers", 2}, {"num_attention_heads", 4}, {"vocab_size", 100},
              {"max_position_embeddings", 128}};
}

static json llama_base() {
  return json{{"architectures", {"LlamaForCausalLM"}}, {"model_type", "llama"}, {"hidden_size", 64},
              {"intermediate_size", 96}, {"num_hidden_layers", 2}, {"num_attention_heads", 8},
              {"num_key_value_heads", 2}, {"vocab_size", 100}, {"max_position_embeddings", 128}};
}

TEST_CASE("GPT-NeoX defaults and new spellings (partial_rotary_factor, rope_theta, rope_parameters)") {
  json j = neox_base();
  ModelConfig c = parse_hf_config(j, "c");
  CHECK(c.intermediate_size == 256);  // 4 * hidden
  CHECK(c.rotary_ndims == 4);         // 16 * 0.25
  CHECK(c.use_parallel_residual);
  j["partial_rotary_factor"] = 0.5;
  j["rope_theta"] = 5000.0;
  c = parse_hf_config(j, "c");
  CHECK(c.rotary_ndims == 8);
  CHECK(c.rope_theta == 5000.0);
  j = neox_base();
  j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 20000.0}, {"partial_rotary_factor", 1.0}};
  c = parse_hf_config(j, "c");
  CHECK(c.rotary_ndims == 16);
  CHECK(c.rope_theta == 20000.0);
  j = neox_base();
  j["rotary_pct"] = 0.25;
  j["rotary_emb_base"] = 7.0;
  j["hidden_act"] = "gelu_new";
  c = parse_hf_config(j, "c");
  CHECK(c.rope_theta == 7.0);
  CHECK(c.hidden_act == Activation::GeluTanh);
}

TEST_CASE("rope_scaling: linear, llama3, dynamic (type and rope_type keys); unknown types are errors") {
  json j = llama_base();
  j["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
  ModelConfig c = parse_hf_config(j, "c");
  CHECK(c.rope_type == RopeType::Linear);
  CHECK(c.rope_factor == 2.0);
  j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 32.0}, {"low_freq_factor", 1.0}, {"high_freq_factor", 4.0},
                       {"original_max_position_embeddings", 8192}};
  c = parse_hf_config(j, "c");
  CHECK(c.rope_type == RopeType::Llama3);
  CHECK(c.rope_factor == 32.0);
  CHECK(c.rope_original_max_position_embeddings == 8192);
  j["rope_scaling"] = {{"rope_type", "ntk-by-parts"}, {"factor", 4.0}};
  CHECK(error_of(j).find("unsupported rope scaling type \"ntk-by-parts\"") != std::string::npos);
  j["rope_scaling"] = {{"type", "dynamic"}, {"factor", 4.0}};
  c = parse_hf_config(j, "c");
  CHECK(c.rope_type == RopeType::Dynamic);
  CHECK(c.rope_factor == 4.0);
  const json m = model_config_to_json(c);
  CHECK(m["rope_scaling"] == json{{"rope_type", "dynamic"}, {"factor", 4.0}});
  CHECK(model_config_from_json(m, "manifest.json").rope_type == RopeType::Dynamic);
  j["rope_scaling"] = {{"type", "su"}, {"factor", 4.0}};  // longrope's older name, without its factor lists
  CHECK(error_of(j).find("short_factor must be a non-empty list") != std::string::npos);
}

TEST_CASE("rope_parameters and rope_scaling in one config: used when they agree, an error naming both when not") {
  json j = llama_base();
  j["rope_parameters"] = {{"rope_theta", 500000.0}, {"rope_type", "default"}};
  j["rope_scaling"] = nullptr;  // transformers < 5 spelling of "no scaling"
  CHECK(parse_hf_config(j, "c").rope_type == RopeType::Default);
  j["rope_scaling"] = {{"type", "linear"}, {"factor", 4.0}};  // dropped silently before: the model ran unscaled
  std::string e = error_of(j);
  CHECK_MESSAGE(e.find(": rope_parameters {\"rope_theta\":500000.0,\"rope_type\":\"default\"}") != std::string::npos, e);
  CHECK_MESSAGE(e.find(" and rope_scaling {\"factor\":4.0,\"type\":\"linear\"} disagree") != std::string::npos, e);
  j["rope_parameters"] = "x";  // not an object: refused, not read as "no scaling"
  CHECK(error_of(j) == "config.json: rope_parameters must be an object or null");
  j["rope_parameters"] = {{"rope_theta", 500000.0}, {"rope_type", "default"}};
  j["rope_scaling"] = {{"rope_type", "mrope"}, {"factor", 4.0}};
  e = error_of(j);
  CHECK_MESSAGE(e.find("unsupported rope scaling type \"mrope\" (rope_scaling)") != std::string::npos, e);
  j["rope_parameters"] = {{"rope_theta", 500000.0}, {"rope_type", "linear"}, {"factor", 4.0}};
  j["rope_scaling"] = {{"type", "linear"}, {"factor", 4.0}};  // the same scaling twice: fine
  const ModelConfig c = parse_hf_config(j, "c");
  CHECK(c.rope_type == RopeType::Linear);
  CHECK(c.rope_factor == 4.0);
  CHECK(c.rope_theta == 500000.0);
}

TEST_CASE("config errors: unsupported architecture lists the supported ones; missing fields are named") {
  json j = llama_base();
  j["architectures"] = {"BertModel"};
  const std::string e = error_of(j);
  CHECK(e.find("unsupported architecture \"BertModel\"") != std::string::npos);
  try {
    parse_hf_config(j, "c");
  } catch (const Error& err) {
    CHECK(err.hint().find("GPTNeoXForCausalLM, LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM") != std::string::npos);
  }
  for (const char* field : {"hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size", "intermediate_size"}) {
    json k = llama_base();
    k.erase(field);
    CHECK_MESSAGE(error_of(k).find(std::string("\"") + field + "\" is missing") != std::string::npos, field);
  }
  json a = llama_base();
  a["hidden_act"] = "mish";
  CHECK(error_of(a).find("unsupported hidden_act \"mish\"") != std::string::npos);
}

TEST_CASE("config values that would run a broken model are refused: norm epsilon, special ids, an edited \"arch\"") {
  json j = llama_base();
  j["rms_norm_eps"] = -1.0;
  CHECK(error_of(j) == "config.json: the norm epsilon (rms_norm_eps / layer_norm_eps) must be positive, got -1.000000");
  j = llama_base();
  j["bos_token_id"] = 99999;
  CHECK(error_of(j).find("config.json: bos_token_id 99999 is outside the vocabulary [0, ") == 0);
  j = llama_base();
  j["eos_token_id"] = json::array({2, -1});
  CHECK(error_of(j).find("config.json: eos_token_id -1 is outside the vocabulary") == 0);
  // manifest.json's "model": "arch" is derived from "architectures"; an edit of it alone is named
  json m = model_config_to_json(parse_hf_config(llama_base(), "config.json"));
  m["arch"] = "mamba";
  try {
    model_config_from_json(m, "manifest.json");
    FAIL("an edited \"arch\" was accepted");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("\"arch\" is \"mamba\" but \"architectures\"") != std::string::npos);
  }
  m = model_config_to_json(parse_hf_config(llama_base(), "config.json"));
  m["rotary_ndims"] = 1000;
  try {
    model_config_from_json(m, "manifest.json");
    FAIL("rotary_ndims 1000 was accepted");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("manifest.json (\"model\"): rotary_ndims 1000 must be even and in [2, head_dim ") == 0);
  }
}

TEST_CASE("model_config_to_json / from_json round trip") {
  json j = llama_base();
  j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 2.0}, {"high_freq_factor", 4.0},
                       {"original_max_position_embeddings", 4096}};
  j["eos_token_id"] = {2, 7};
  j["tie_word_embeddings"] = true;
  j["head_dim"] = 16;  // != hidden / heads
  const ModelConfig a = parse_hf_config(j, "c");
  const ModelConfig b = model_config_from_json(model_config_to_json(a), "manifest.json");
  CHECK(b.arch == a.arch);
  CHECK(b.head_dim == 16);
  CHECK(b.num_key_value_heads == 2);
  CHECK(b.rope_type == RopeType::Llama3);
  CHECK(b.rope_low_freq_factor == 2.0);
  CHECK(b.rope_original_max_position_embeddings == 4096);
  CHECK(b.eos_token_ids == std::vector<int64_t>{2, 7});
  CHECK(b.tie_word_embeddings);
  CHECK(b.rotary_ndims == a.rotary_ndims);
  CHECK(model_config_to_json(b) == model_config_to_json(a));
  const ModelConfig n = parse_hf_config(load("redpajama-incite-7b-base.config.json"), "rp");
  CHECK(model_config_to_json(model_config_from_json(model_config_to_json(n), "m")) == model_config_to_json(n));
}

TEST_CASE("make_parallel_layout: uneven splits spread the remainder and cover every head, KV head and column") {
  // Qwen2-72B's shape at tp 6: 64 heads -> 11/11/11/11/10/10, 8 KV heads of 8 -> 13 copies.
  json q = llama_base();
  q["num_attention_heads"] = 64;
  q["num_key_value_heads"] = 8;
  q["hidden_size"] = 8192;
  q["intermediate_size"] = 29568;
  const ModelConfig c = parse_hf_config(q, "q");
  const ParallelLayout l = make_parallel_layout(c, 6);
  const int64_t heads[] = {11, 11, 11, 11, 10, 10};
  int64_t copies = 0, next_head = 0, next_col = 0;
  for (int r = 0; r < 6; ++r) {
    const TpRankRanges& t = l.tp(r);
    CHECK(t.heads.size() == heads[r]);
    CHECK(t.heads.begin == next_head);
    next_head = t.heads.end;
    CHECK(t.kv_heads.begin == t.heads.begin / 8);
    CHECK(t.kv_heads.end == (t.heads.end - 1) / 8 + 1);
    copies += t.kv_heads.size();
    CHECK(t.mlp_columns.begin == next_col);
    CHECK(t.mlp_columns.size() == 4928);  // 29568 / 6, a multiple of 64
    next_col = t.mlp_columns.end;
  }
  CHECK(next_head == 64);
  CHECK(next_col == 29568);
  CHECK(copies == 13);
  CHECK(l.kv_heads_replicated);
  // 90 columns at tp 4: 2 is the largest power of two dividing 90: 45 units -> 24 / 22 / 22 / 22.
  CHECK(mlp_column_unit(29568, 5) == 32);  // 924 units -> 185 / 185 / 185 / 185 / 184 (64 would give 5952 widest)
  json k = llama_base();
  k["intermediate_size"] = 90;
  const ParallelLayout l4 = make_parallel_layout(parse_hf_config(k, "c"), 4);
  CHECK(mlp_column_unit(90, 4) == 2);
  CHECK(l4.tp(0).mlp_columns == Range{0, 24});
  CHECK(l4.tp(3).mlp_columns == Range{68, 90});
  // A rank would hold no head: refused, naming the largest tp.
  CHECK_THROWS_WITH_AS(make_parallel_layout(c, 65), doctest::Contains("tp_size 65 is larger than num_attention_heads 64"), Error);
}

namespace {

/// A config.json with GPT-Neo-2.7B's dimensions (hidden 2560, 20 heads, 32 layers alternating global /
/// local with window 256, 2048 positions, vocab 50257) in transformers' GPTNeoConfig spelling, written
/// by hand: not a copy of the published file.
json gpt_neo_2_7b() {
  return json::parse(R"({
    "architectures": ["GPTNeoForCausalLM"], "model_type": "gpt_neo", "activation_function": "gelu_new",
    "attention_types": [[["global", "local"], 16]], "window_size": 256, "hidden_size": 2560,
    "num_heads": 20, "num_layers": 32, "intermediate_size": null, "layer_norm_epsilon": 1e-05,
    "max_position_embeddings": 2048, "vocab_size": 50257, "bos_token_id": 50256, "eos_token_id": 50256,
    "torch_dtype": "float32"})");
}

}  // namespace

TEST_CASE("GPT-Neo-2.7B: num_layers / num_heads, learned positions, global/local windows, unscaled scores") {
  const ModelConfig c = parse_hf_config(gpt_neo_2_7b(), "neo");
  CHECK(c.arch == Arch::GptNeo);
  CHECK(c.hidden_size == 2560);
  CHECK(c.num_hidden_layers == 32);
  CHECK(c.num_attention_heads == 20);
  CHECK(c.num_key_value_heads == 20);
  CHECK(c.head_dim == 128);
  CHECK(c.intermediate_size == 10240);  // null: 4 * hidden
  CHECK(c.max_position_embeddings == 2048);
  CHECK(c.position_embedding == PositionKind::Learned);
  CHECK(c.rotary_ndims == 0);
  CHECK(c.attention_scale == 1.0);
  REQUIRE(c.layer_windows.size() == 32);
  for (size_t l = 0; l < 32; ++l) CHECK(c.layer_windows[l] == (l % 2 == 0 ? 0 : 256));
  CHECK(c.norm == NormKind::LayerNorm);
  CHECK(c.norm_eps == 1e-5);
  CHECK(c.hidden_act == Activation::GeluTanh);
  CHECK_FALSE(c.gated_mlp);
  CHECK_FALSE(c.use_parallel_residual);
  CHECK_FALSE(c.attention_bias);
  CHECK(c.attention_out_bias);
  CHECK(c.mlp_bias);
  CHECK(c.tie_word_embeddings);  // GPTNeoConfig default
  CHECK(c.eos_token_ids == std::vector<int64_t>{50256});
  for (int tp : {1, 2, 4, 5, 10}) {
    CAPTURE(tp);
    const ParallelLayout L = make_parallel_layout(c, tp);
    CHECK(L.tp(0).heads.size() == 20 / tp);
    CHECK(L.tp(tp - 1).mlp_columns.size() == 10240 / tp);
    CHECK(L.vocab_size_padded % tp == 0);
    CHECK(L.vocab_size_padded >= 50257);
  }
  // manifest round trip keeps the windows, the scale and the learned positions
  const ModelConfig b = model_config_from_json(model_config_to_json(c), "manifest.json");
  CHECK(b.layer_windows == c.layer_windows);
  CHECK(b.attention_scale == 1.0);
  CHECK(b.position_embedding == PositionKind::Learned);
  CHECK(b.rotary_ndims == 0);
  CHECK(model_config_to_json(b) == model_config_to_json(c));
}

TEST_CASE("GPT-Neo config errors: an unknown attention type, a count that does not match num_layers") {
  json j = gpt_neo_2_7b();
  j["attention_types"] = json::parse(R"([[["global", "sparse"], 16]])");
  const std::string e = error_of(j);
  CHECK(e.find("attention_types") != std::string::npos);
  CHECK(e.find("\"sparse\"") != std::string::npos);
  j["attention_types"] = json::parse(R"([[["global", "local"], 15]])");
  CHECK(error_of(j).find("30 per-layer attention types for 32 layers") != std::string::npos);
  j["attention_types"] = "global";
  CHECK(error_of(j).find("attention_types") != std::string::npos);
  json d = gpt_neo_2_7b();  // GPTNeoConfig defaults: [[["global", "local"], 12]] (24 layers), window 256
  d.erase("attention_types");
  d.erase("window_size");
  d["num_layers"] = 24;
  const ModelConfig c = parse_hf_config(d, "neo");
  REQUIRE(c.layer_windows.size() == 24);
  CHECK(c.layer_windows[1] == 256);
}

TEST_CASE("a manifest written before per-layer windows and learned positions existed loads unchanged") {
  const ModelConfig n = parse_hf_config(load("redpajama-incite-7b-base.config.json"), "rp");
  json m = model_config_to_json(n);
  m.erase("layer_windows");
  m.erase("attention_scale");
  m.erase("position_embedding");
  const ModelConfig b = model_config_from_json(m, "manifest.json");
  CHECK(b.position_embedding == PositionKind::Rotary);
  CHECK(b.layer_windows.empty());
  CHECK(b.attention_scale == 0.0);
  CHECK(b.rotary_ndims == n.rotary_ndims);
  json edited = model_config_to_json(n);
  edited["position_embedding"] = "learned";
  CHECK_THROWS_WITH_AS(model_config_from_json(edited, "manifest.json"), doctest::Contains("position_embedding"), Error);
  // attention_scale follows from the architecture too: an edit is refused, not ignored
  edited = model_config_to_json(n);
  edited["attention_scale"] = 2.0;
  CHECK_THROWS_WITH_AS(model_config_from_json(edited, "manifest.json"), doctest::Contains("\"attention_scale\" is 2.0"), Error);
  json neo = model_config_to_json(parse_hf_config(gpt_neo_2_7b(), "neo"));
  CHECK(model_config_from_json(neo, "manifest.json").attention_scale == 1.0);
  neo["attention_scale"] = 0.0;
  CHECK_THROWS_WITH_AS(model_config_from_json(neo, "manifest.json"), doctest::Contains("attention_scale"), Error);
}

static json qwen2_base() {
  json j = llama_base();
  j["architectures"] = {"Qwen2ForCausalLM"};
  j["model_type"] = "qwen2";
  j["num_hidden_layers"] = 4;
  j["sliding_window"] = 16;
  return j;
}

TEST_CASE("Qwen2 sliding window: only with use_sliding_window, on layer_types' sliding layers or l >= max_window_layers") {
  json j = qwen2_base();
  ModelConfig c = parse_hf_config(j, "q");
  CHECK(c.sliding_window == 0);  // use_sliding_window defaults to false
  CHECK(c.layer_windows.empty());
  j["use_sliding_window"] = true;
  c = parse_hf_config(j, "q");  // max_window_layers 28 >= 4 layers: no layer slides
  CHECK(c.sliding_window == 0);
  CHECK(c.layer_windows.empty());
  j["max_window_layers"] = 2;
  c = parse_hf_config(j, "q");
  CHECK(c.sliding_window == 16);
  CHECK(c.layer_windows == std::vector<int64_t>{0, 0, 16, 16});
  // manifest round trip keeps the windows (max_window_layers is not stored)
  const ModelConfig b = model_config_from_json(model_config_to_json(c), "manifest.json");
  CHECK(b.layer_windows == c.layer_windows);
  CHECK(b.sliding_window == 16);
  j["layer_types"] = {"sliding_attention", "full_attention", "sliding_attention", "full_attention"};
  c = parse_hf_config(j, "q");  // layer_types wins over max_window_layers
  CHECK(c.layer_windows == std::vector<int64_t>{16, 0, 16, 0});
  j["layer_types"] = {"sliding_attention", "full_attention"};
  CHECK(error_of(j).find("layer_types is not a list of 4 entries") != std::string::npos);
  j["layer_types"] = {"sliding_attention", "full_attention", "chunked_attention", "full_attention"};
  CHECK(error_of(j).find("unknown layer type \"chunked_attention\"") != std::string::npos);
  j.erase("layer_types");
  j["sliding_window"] = 128;  // >= max_position_embeddings: never limits attention
  c = parse_hf_config(j, "q");
  CHECK(c.sliding_window == 0);
  CHECK(c.layer_windows.empty());
}

TEST_CASE("a manifest whose sliding_window has no layer_windows: Mistral's on every layer, Qwen2's refused") {
  json mi = llama_base();
  mi["architectures"] = {"MistralForCausalLM"};
  mi["sliding_window"] = 6;
  const ModelConfig m = parse_hf_config(mi, "m");
  CHECK(m.layer_windows == std::vector<int64_t>{6, 6});
  json old = model_config_to_json(m);
  old["layer_windows"] = json::array();
  CHECK(model_config_from_json(old, "manifest.json").layer_windows == std::vector<int64_t>{6, 6});
  old.erase("layer_windows");
  CHECK(model_config_from_json(old, "manifest.json").layer_windows == std::vector<int64_t>{6, 6});
  json q = qwen2_base();
  q["use_sliding_window"] = true;
  q["max_window_layers"] = 0;
  json oldq = model_config_to_json(parse_hf_config(q, "q"));
  oldq["layer_windows"] = json::array();
  CHECK_THROWS_WITH_AS(model_config_from_json(oldq, "manifest.json"), doctest::Contains("without layer_windows"), Error);
}

TEST_CASE("yarn rope scaling: Qwen2.5's rope_scaling spelling, transformers' defaults, manifest round trip") {
  json j = qwen2_base();
  j["max_position_embeddings"] = 32768;
  j["rope_scaling"] = {{"type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 32768}};
  ModelConfig c = parse_hf_config(j, "q");
  CHECK(c.rope_type == RopeType::Yarn);
  CHECK(c.rope_factor == 4.0);
  CHECK(c.rope_original_max_position_embeddings == 32768);
  CHECK(c.rope_beta_fast == 32.0);
  CHECK(c.rope_beta_slow == 1.0);
  CHECK(c.rope_truncate);
  CHECK(c.rope_attention_factor == doctest::Approx(0.1 * std::log(4.0) + 1.0).epsilon(1e-15));
  const ModelConfig b = model_config_from_json(model_config_to_json(c), "manifest.json");
  CHECK(b.rope_type == RopeType::Yarn);
  CHECK(b.rope_factor == c.rope_factor);
  CHECK(b.rope_original_max_position_embeddings == 32768);
  CHECK(b.rope_attention_factor == c.rope_attention_factor);
  CHECK(b.rope_truncate);

  // explicit fields; mscale / mscale_all_dim (DeepSeek style); factor from the lengths when absent
  j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 8.0}, {"original_max_position_embeddings", 4096},
                       {"beta_fast", 16}, {"beta_slow", 2}, {"truncate", false}, {"mscale", 0.5}, {"mscale_all_dim", 1.0}};
  c = parse_hf_config(j, "q");
  CHECK(c.rope_beta_fast == 16.0);
  CHECK(c.rope_beta_slow == 2.0);
  CHECK_FALSE(c.rope_truncate);
  CHECK(c.rope_attention_factor == doctest::Approx((0.05 * std::log(8.0) + 1.0) / (0.1 * std::log(8.0) + 1.0)));
  j["rope_scaling"] = {{"rope_type", "yarn"}, {"original_max_position_embeddings", 8192}, {"attention_factor", 1.5}};
  c = parse_hf_config(j, "q");
  CHECK(c.rope_factor == 4.0);  // 32768 / 8192
  CHECK(c.rope_attention_factor == 1.5);
  // a top-level original_max_position_embeddings wins (transformers' standardize_rope_params)
  j["original_max_position_embeddings"] = 16384;
  c = parse_hf_config(j, "q");
  CHECK(c.rope_original_max_position_embeddings == 16384);
  CHECK(c.rope_factor == 2.0);
  CHECK(model_config_from_json(model_config_to_json(c), "m").rope_original_max_position_embeddings == 16384);
  // without original_max_position_embeddings: max_position_embeddings, factor 1, attention factor 1
  j.erase("original_max_position_embeddings");
  j["rope_scaling"] = {{"rope_type", "yarn"}};
  c = parse_hf_config(j, "q");
  CHECK(c.rope_original_max_position_embeddings == 32768);
  CHECK(c.rope_attention_factor == 1.0);
}

TEST_CASE("longrope rope scaling (Phi-3-mini-128k's spelling): transformers' defaults, manifest round trip, bad factor lists") {
  json j = llama_base();
  j["architectures"] = {"Phi3ForCausalLM"};
  j["model_type"] = "phi3";
  j["max_position_embeddings"] = 131072;
  j["original_max_position_embeddings"] = 4096;
  const int64_t half = parse_hf_config(j, "p").rotary_ndims / 2;
  std::vector<double> s(static_cast<size_t>(half)), l(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) {
    s[static_cast<size_t>(i)] = 1.0 + 0.01 * static_cast<double>(i);
    l[static_cast<size_t>(i)] = 2.0 + static_cast<double>(i);
  }
  j["rope_scaling"] = {{"type", "longrope"}, {"short_factor", s}, {"long_factor", l}};
  ModelConfig c = parse_hf_config(j, "p");
  CHECK(c.rope_type == RopeType::LongRope);
  CHECK(c.rope_original_max_position_embeddings == 4096);  // the top-level field
  CHECK(c.rope_factor == 32.0);                             // 131072 / 4096
  CHECK(c.rope_attention_factor == doctest::Approx(std::sqrt(1.0 + std::log(32.0) / std::log(4096.0))).epsilon(1e-15));
  CHECK(c.rope_short_factor == s);
  CHECK(c.rope_long_factor == l);
  CHECK(model_position_limit(c) == 4096);
  const ModelConfig b = model_config_from_json(model_config_to_json(c), "manifest.json");
  CHECK(b.rope_type == RopeType::LongRope);
  CHECK(b.rope_short_factor == s);
  CHECK(b.rope_long_factor == l);
  CHECK(b.rope_attention_factor == c.rope_attention_factor);
  CHECK(b.rope_original_max_position_embeddings == 4096);
  CHECK(model_position_limit(b) == 4096);
  // "su" is the older name; an explicit attention_factor wins
  j["rope_scaling"] = {{"type", "su"}, {"short_factor", s}, {"long_factor", l}, {"attention_factor", 1.25}};
  CHECK(parse_hf_config(j, "p").rope_attention_factor == 1.25);
  // factor lists that do not fit the rotary dims, or hold something other than positive numbers
  auto error_for = [&](const json& rs) {
    j["rope_scaling"] = rs;
    try {
      parse_hf_config(j, "config.json");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  std::vector<double> shorter(s.begin(), s.end() - 1);
  CHECK(error_for({{"type", "longrope"}, {"short_factor", shorter}, {"long_factor", l}}).find("need " + std::to_string(half)) !=
        std::string::npos);
  CHECK(error_for({{"type", "longrope"}, {"long_factor", l}}).find("short_factor must be a non-empty list") != std::string::npos);
  json bad = s;
  bad[0] = -1.0;
  CHECK(error_for({{"type", "longrope"}, {"short_factor", bad}, {"long_factor", l}}).find("positive numbers") != std::string::npos);
  bad[0] = "x";
  CHECK(error_for({{"type", "longrope"}, {"short_factor", s}, {"long_factor", bad}}).find("long_factor must hold") != std::string::npos);
}

TEST_CASE("a manifest written before rope_attention_factor existed loads with 1") {
  json m = model_config_to_json(parse_hf_config(llama_base(), "l"));
  m.erase("rope_attention_factor");
  CHECK(model_config_from_json(m, "manifest.json").rope_attention_factor == 1.0);
  m["rope_attention_factor"] = -1.0;
  CHECK_THROWS_WITH_AS(model_config_from_json(m, "manifest.json"), doctest::Contains("rope_attention_factor"), Error);
}

TEST_CASE("balance_stages: the largest stage as small as whole layers allow, the others even") {
  // 8 layers of 10, an embedding and a head of 45: the outer stages take one layer each (55), the six
  // others split 3 / 3.
  const std::vector<uint64_t> layers(8, 10);
  const std::vector<Range> s4 = balance_stages(layers, 45, 45, 4);
  REQUIRE(s4.size() == 4);
  CHECK(s4[0] == Range{0, 1});
  CHECK(s4[1] == Range{1, 4});
  CHECK(s4[2] == Range{4, 7});
  CHECK(s4[3] == Range{7, 8});
  const std::vector<Range> s2 = balance_stages({5, 5, 5, 5}, 0, 0, 2);
  CHECK(s2[0] == Range{0, 2});
  CHECK(s2[1] == Range{2, 4});
  // an embedding heavier on the first stage: it holds fewer layers
  const std::vector<Range> e = balance_stages(std::vector<uint64_t>(10, 10), 30, 0, 2);
  CHECK(e[0] == Range{0, 4});  // 30 + 40 = 70 vs 60
  CHECK(e[1] == Range{4, 10});
  CHECK_THROWS_AS(balance_stages(layers, 0, 0, 9), Error);
}

TEST_CASE("config numbers that would overflow: not integers, beyond int32, or dimensions beyond 2^24") {
  auto error_for = [](const char* key, const json& v) {
    json j = llama_base();
    j[key] = v;
    try {
      parse_hf_config(j, "config.json");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  CHECK(error_for("hidden_size", 1e300).find("must be an integer") != std::string::npos);
  CHECK(error_for("hidden_size", json::parse("20000000000000000000000000000000000000000")).find("must be an integer") !=
        std::string::npos);  // 2e40: nlohmann reads it as a float
  CHECK(error_for("hidden_size", uint64_t{18446744073709551615ull}).find("outside the +-2147483647") != std::string::npos);
  CHECK(error_for("vocab_size", int64_t{1} << 31).find("outside the +-2147483647") != std::string::npos);
  CHECK(error_for("intermediate_size", int64_t{1} << 25).find("intermediate_size 33554432 is more than the 16777216") !=
        std::string::npos);
  CHECK(error_for("max_position_embeddings", int64_t{1} << 30) == "(accepted)");  // positions are not dimensions
  // the manifest's model section goes through the same checks
  json m = model_config_to_json(parse_hf_config(llama_base(), "c"));
  m["hidden_size"] = int64_t{1} << 26;
  CHECK_THROWS_WITH_AS(model_config_from_json(m, "manifest.json"), doctest::Contains("hidden_size 67108864 is more than"), Error);
}
