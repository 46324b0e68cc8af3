// test_real_configs.cpp: published config.json files of one model per family (tests/fixtures/configs, sources
// in its README.md): Qwen3-8B, Phi-3-mini-4k-instruct, GPT-J-6B, Falcon-7B-instruct; and the written-out
// fields of Gemma-2-9B, OLMo-2-1124-7B and StarCoder2-3B (published_configs.h: no file committed). For each:
//  1. the real file parsed by the model registry, with the values it derives (heads, KV heads, head_dim,
//     MLP size, vocabulary, rotary dims, the family's own fields);
//  2. `tpshard plan` on the real file: every tp_rank's weight bytes against a count made here from the
//     config's numbers (each tensor 4096-aligned, bf16), and planned_weight_bytes against the same count;
//  3. the same config with 2 layers and random weights, converted by `tpshard convert --tp ...` (one tp
//     size uneven), every rank's tensor shapes against the layout formulas. A 2-layer checkpoint at the
//     full sizes would be 0.5-2.5 GB, so this step uses a shape-scaled variant: hidden_size and the MLP
//     size reduced (and with them head_dim where hidden_size sets it; GPT-J's rotary_dim kept at a quarter
//     of head_dim, as in the file); heads, KV heads, vocabulary, head_dim where the config gives it and
//     the family's flags are the file's own. The HF tensor names are written out here per family.
#include <doctest/doctest.h>

#include <fstream>

#include "common/progress.h"
#include "format/error.h"
#include "format/shard_file.h"
#include "model/manifest.h"
#include "model/memory_plan.h"
#include "model/model_config.h"
#include "model/parallel_layout.h"
#include "published_configs.h"
#include "test_util.h"

using namespace tpshard;
using namespace tpshard::test;
using nlohmann::json;

namespace {

using Shape = std::vector<int64_t>;
using Shapes = std::map<std::string, Shape>;

std::string config_path(const std::string& name) { return std::string(TPSHARD_FIXTURES) + "/configs/" + name; }

json load(const std::string& name) {
  std::ifstream f(config_path(name));
  REQUIRE(f.good());
  return json::parse(f);
}

/// Rank r's share [begin, end) of n items over tp ranks, the first n % tp ranks one more (docs/PARALLEL.md).
std::pair<int64_t, int64_t> share(int64_t n, int tp, int r) {
  const int64_t base = n / tp, extra = n % tp, b = r * base + std::min<int64_t>(r, extra);
  return {b, b + base + (r < extra ? 1 : 0)};
}

/// The numbers a family's per-rank shapes follow from.
struct Dims {
  int64_t hidden, inter, vocab, heads, kv_heads, head_dim, layers;
};

/// One rank's part of the attention, MLP and vocabulary.
struct RankPart {
  int64_t heads, kv_heads, mlp, vocab_rows;
};

RankPart rank_part(const Dims& d, int tp, int r) {
  const auto [h0, h1] = share(d.heads, tp, r);
  const int64_t group = d.heads / d.kv_heads;
  const int64_t u = mlp_column_unit(d.inter, tp);  // whole units of columns (test_model_config.cpp)
  const auto [u0, u1] = share(d.inter / u, tp, r);
  // the KV heads of the groups its query heads fall in (a group straddling two ranks is held by both)
  return {h1 - h0, (h1 - 1) / group + 1 - h0 / group, (u1 - u0) * u, (d.vocab + tp - 1) / tp};
}

std::string blk(int l, const std::string& s) { return "blk." + std::to_string(l) + "." + s; }

/// What a Llama-shaped block holds besides q/k/v, the output projection and gate/up / down.
struct LlamaBlock {
  bool head_qk_norm = false;   ///< Qwen3: q/k RMSNorm weights over head_dim
  bool whole_qk_norm = false;  ///< OLMo 2: over the whole q / k projection, replicated
  bool pre_norms = true;       ///< attn_norm / ffn_norm before the branches (OLMo 2: none)
  bool post_norms = false;     ///< Gemma 2, OLMo 2: attn_post_norm / ffn_post_norm on the branch outputs
  bool tied = false;           ///< no output.weight: the LM head is token_embd
};

/// The Llama block (Qwen3, Phi-3, Gemma 2, OLMo 2): q/k/v fused per rank (Q of the rank's heads, K and V
/// of its KV heads), gate/up fused, down split by columns, vocabulary rows padded.
Shapes llama_shapes(const Dims& d, int tp, int r, const LlamaBlock& b) {
  const RankPart p = rank_part(d, tp, r);
  const int64_t H = d.hidden, hd = d.head_dim;
  Shapes s{{"token_embd.weight", {p.vocab_rows, H}}, {"output_norm.weight", {H}}};
  if (!b.tied) s["output.weight"] = {p.vocab_rows, H};
  for (int l = 0; l < d.layers; ++l) {
    if (b.pre_norms) {
      s[blk(l, "attn_norm.weight")] = {H};
      s[blk(l, "ffn_norm.weight")] = {H};
    }
    if (b.post_norms) {
      s[blk(l, "attn_post_norm.weight")] = {H};
      s[blk(l, "ffn_post_norm.weight")] = {H};
    }
    s[blk(l, "attn_qkv.weight")] = {(p.heads + 2 * p.kv_heads) * hd, H};
    if (b.head_qk_norm) {
      s[blk(l, "attn_q_norm.weight")] = {hd};
      s[blk(l, "attn_k_norm.weight")] = {hd};
    }
    if (b.whole_qk_norm) {
      s[blk(l, "attn_q_norm.weight")] = {d.heads * hd};
      s[blk(l, "attn_k_norm.weight")] = {d.kv_heads * hd};
    }
    s[blk(l, "attn_output.weight")] = {H, p.heads * hd};
    s[blk(l, "ffn_gate_up.weight")] = {2 * p.mlp, H};
    s[blk(l, "ffn_down.weight")] = {H, p.mlp};
  }
  return s;
}

const LlamaBlock kQwen3{true, false, true, false, false};
const LlamaBlock kPhi3{};
const LlamaBlock kGemma2{false, false, true, true, true};
const LlamaBlock kOlmo2{false, true, false, true, false};

/// GPT-J: ln_1 feeds both branches (stored as attn_norm and ffn_norm), no q/k/v/out bias, fc_in / fc_out
/// with bias, an LM head with a bias.
Shapes gptj_shapes(const Dims& d, int tp, int r) {
  const RankPart p = rank_part(d, tp, r);
  const int64_t H = d.hidden, hd = d.head_dim;
  Shapes s{{"token_embd.weight", {p.vocab_rows, H}}, {"output_norm.weight", {H}}, {"output_norm.bias", {H}},
           {"output.weight", {p.vocab_rows, H}},     {"output.bias", {p.vocab_rows}}};
  for (int l = 0; l < d.layers; ++l) {
    for (const char* n : {"attn_norm.weight", "attn_norm.bias", "ffn_norm.weight", "ffn_norm.bias", "ffn_down.bias"})
      s[blk(l, n)] = {H};
    s[blk(l, "attn_qkv.weight")] = {3 * p.heads * hd, H};
    s[blk(l, "attn_output.weight")] = {H, p.heads * hd};
    s[blk(l, "ffn_up.weight")] = {p.mlp, H};
    s[blk(l, "ffn_up.bias")] = {p.mlp};
    s[blk(l, "ffn_down.weight")] = {H, p.mlp};
  }
  return s;
}

/// Falcon-7B: multi-query (one KV head, held by every rank), one input_layernorm for both parallel
/// branches, no biases on the linear layers, LM head tied to the embedding.
Shapes falcon_shapes(const Dims& d, int tp, int r) {
  const RankPart p = rank_part(d, tp, r);
  const int64_t H = d.hidden, hd = d.head_dim;
  Shapes s{{"token_embd.weight", {p.vocab_rows, H}}, {"output_norm.weight", {H}}, {"output_norm.bias", {H}}};
  for (int l = 0; l < d.layers; ++l) {
    for (const char* n : {"attn_norm.weight", "attn_norm.bias", "ffn_norm.weight", "ffn_norm.bias"}) s[blk(l, n)] = {H};
    s[blk(l, "attn_qkv.weight")] = {(p.heads + 2 * p.kv_heads) * hd, H};
    s[blk(l, "attn_output.weight")] = {H, p.heads * hd};
    s[blk(l, "ffn_up.weight")] = {p.mlp, H};
    s[blk(l, "ffn_down.weight")] = {H, p.mlp};
  }
  return s;
}

/// StarCoder2: LayerNorms with biases, q/k/v fused per rank with their biases, o_proj and the plain MLP
/// (c_fc / c_proj) with biases, LM head tied to the embedding.
Shapes starcoder2_shapes(const Dims& d, int tp, int r) {
  const RankPart p = rank_part(d, tp, r);
  const int64_t H = d.hidden, hd = d.head_dim, qkv = (p.heads + 2 * p.kv_heads) * hd;
  Shapes s{{"token_embd.weight", {p.vocab_rows, H}}, {"output_norm.weight", {H}}, {"output_norm.bias", {H}}};
  for (int l = 0; l < d.layers; ++l) {
    for (const char* n : {"attn_norm.weight", "attn_norm.bias", "ffn_norm.weight", "ffn_norm.bias", "attn_output.bias",
                          "ffn_down.bias"})
      s[blk(l, n)] = {H};
    s[blk(l, "attn_qkv.weight")] = {qkv, H};
    s[blk(l, "attn_qkv.bias")] = {qkv};
    s[blk(l, "attn_output.weight")] = {H, p.heads * hd};
    s[blk(l, "ffn_up.weight")] = {p.mlp, H};
    s[blk(l, "ffn_up.bias")] = {p.mlp};
    s[blk(l, "ffn_down.weight")] = {H, p.mlp};
  }
  return s;
}

/// Bytes of a rank's weight arena: every tensor starts 4096-aligned (docs/FORMAT.md).
uint64_t arena_bytes(const Shapes& s, uint64_t elem_bytes) {
  uint64_t total = 0;
  for (const auto& [name, shape] : s) {
    uint64_t n = elem_bytes;
    for (int64_t x : shape) n *= static_cast<uint64_t>(x);
    total = (total + 4095) / 4096 * 4096 + n;
  }
  return (total + 4095) / 4096 * 4096;
}

/// `tpshard plan CONFIG ARGS`: exit status, then the output.
std::string tpshard_plan(const std::string& config, const std::string& args) {
  ScratchDir d;
  const std::string log = d / "log.txt";
  const int rc = run_tpshard("plan " + config + " " + args, log);
  return std::to_string(rc) + "\n" + read_text(log);
}

/// Step 2: the config's per-rank weights, from `tpshard plan CONFIG` and planned_weight_bytes, against `shapes`.
void check_plan(const std::string& config, const ModelConfig& c, int tp,
                const std::function<Shapes(int tp, int r)>& shapes) {
  CAPTURE(config);
  CAPTURE(tp);
  const std::string out = tpshard_plan(config, "--tp " + std::to_string(tp) + " --batch 1 --max-seq 2048 --dtype bf16");
  REQUIRE_MESSAGE(out.rfind("0\n", 0) == 0, out);
  CHECK_MESSAGE(out.find("per-GPU memory plan: tp " + std::to_string(tp) + ", batch 1, max_seq 2048, dtype bf16") != std::string::npos, out);
  const ParallelLayout layout = make_parallel_layout(c, tp);
  uint64_t largest = 0;
  for (int r = 0; r < tp; ++r) {
    CAPTURE(r);
    const uint64_t want = arena_bytes(shapes(tp, r), 2);
    largest = std::max(largest, want);
    CHECK(planned_weight_bytes(c, layout, 0, r, DType::BF16) == want);
    if (tp > 1) {  // the per-rank table: "  0        R       heads ..."
      const std::string row = "  0        " + std::to_string(r) + " ";
      const size_t at = out.find(row);
      REQUIRE_MESSAGE(at != std::string::npos, out);
      const std::string line = out.substr(at, out.find('\n', at) - at);
      CHECK_MESSAGE(line.find(" " + human_bytes(want) + " ") != std::string::npos, line);
    }
  }
  CHECK_MESSAGE(out.find("weights      " + std::string(12 - std::min<size_t>(12, human_bytes(largest).size()), ' ') +
                         human_bytes(largest)) != std::string::npos,
                out);
  CHECK(plan_memory_for_config(c, DType::BF16, tp, 1, 1, 2048).weight_bytes == largest);
}

/// Random bf16 tensors in [-2, -0.0078] u [0.0078, 2] (finite), from a fast generator: the shape-scaled
/// checkpoints still hold ~40 MB of embeddings.
struct Bf16Random {
  uint64_t state;
  uint16_t next() {
    state ^= state << 13, state ^= state >> 7, state ^= state << 17;
    const uint16_t sign = static_cast<uint16_t>(state >> 63) << 15;
    const uint16_t exponent = static_cast<uint16_t>(120 + (state >> 32) % 8) << 7;
    return static_cast<uint16_t>(sign | exponent | (state & 0x7f));
  }
};

struct Checkpoint {
  std::map<std::string, StEntry> tensors;
  Bf16Random rng{0x9e3779b97f4a7c15ull};
  void add(const std::string& name, Shape shape) {
    int64_t n = 1;
    for (int64_t x : shape) n *= x;
    StEntry e{"BF16", std::move(shape), std::vector<uint8_t>(static_cast<size_t>(n) * 2)};
    auto* p = reinterpret_cast<uint16_t*>(e.bytes.data());
    for (int64_t i = 0; i < n; ++i) p[i] = rng.next();
    tensors[name] = std::move(e);
  }
};

/// A Llama-style HF checkpoint of `d`: model.embed_tokens, per layer self_attn.{q,k,v,o}_proj (q of
/// heads x head_dim rows, k / v of kv_heads x head_dim), mlp.{gate,up,down}_proj and the layer's `norms`
/// (name under model.layers.L., size), model.norm, and lm_head unless `tied`.
Checkpoint llama_checkpoint(const Dims& d, bool tied, const std::vector<std::pair<std::string, int64_t>>& norms) {
  Checkpoint ck;
  const int64_t q = d.heads * d.head_dim, kv = d.kv_heads * d.head_dim;
  ck.add("model.embed_tokens.weight", {d.vocab, d.hidden});
  for (int l = 0; l < d.layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    for (const auto& [name, size] : norms) ck.add(p + name + ".weight", {size});
    ck.add(p + "self_attn.q_proj.weight", {q, d.hidden});
    ck.add(p + "self_attn.k_proj.weight", {kv, d.hidden});
    ck.add(p + "self_attn.v_proj.weight", {kv, d.hidden});
    ck.add(p + "self_attn.o_proj.weight", {d.hidden, q});
    ck.add(p + "mlp.gate_proj.weight", {d.inter, d.hidden});
    ck.add(p + "mlp.up_proj.weight", {d.inter, d.hidden});
    ck.add(p + "mlp.down_proj.weight", {d.hidden, d.inter});
  }
  ck.add("model.norm.weight", {d.hidden});
  if (!tied) ck.add("lm_head.weight", {d.vocab, d.hidden});
  return ck;
}

/// Step 3: write `config` and `ckpt` to HF_DIR, `tpshard convert HF_DIR -o OUT --tp TPS`, then every rank's
/// tensors (names and shapes) and arena bytes against `shapes`.
void convert_and_check(const json& config, const Checkpoint& ckpt, const std::vector<int>& tps,
                       const std::function<Shapes(int tp, int r)>& shapes) {
  ScratchDir d;
  std::filesystem::create_directories(d / "hf");
  write_text(d / "hf/config.json", config.dump(2));
  write_safetensors(d / "hf/model.safetensors", ckpt.tensors);
  std::string list;
  for (int tp : tps) list += (list.empty() ? "" : ",") + std::to_string(tp);
  const std::string log = d / "convert.log";
  REQUIRE_MESSAGE(run_tpshard("convert " + (d / "hf") + " -o " + (d / "out") + " --tp " + list + " --threads 2", log) == 0,
                  read_text(log));
  const Manifest man = load_manifest(d / "out");
  for (int tp : tps) {
    const auto& shards = shards_for(man, tp, d / "out");
    REQUIRE(shards.size() == static_cast<size_t>(tp));
    for (int r = 0; r < tp; ++r) {
      CAPTURE(tp);
      CAPTURE(r);
      const ShardReader rd(d / "out" + "/" + shards[r].file);
      const Shapes want = shapes(tp, r);
      CHECK(rd.tensors().size() == want.size());
      for (const auto& t : rd.tensors()) {
        CAPTURE(t.name);
        REQUIRE(want.count(t.name) == 1);
        CHECK(t.dtype == DType::BF16);
        CHECK(t.local_shape == want.at(t.name));
      }
      CHECK(rd.header().arena_bytes == arena_bytes(want, 2));
      CHECK(shards[r].weight_bytes == arena_bytes(want, 2));
    }
  }
}

}  // namespace

// ---- Qwen3-8B (Qwen/Qwen3-8B) ----

TEST_CASE("Qwen3-8B config.json: GQA 32/8, head_dim 128 given apart from hidden_size, q/k norms, no sliding window") {
  const ModelConfig c = parse_hf_config(load("qwen3-8b.config.json"), "qwen3-8b");
  CHECK(c.arch == Arch::Qwen3);
  CHECK(c.hidden_size == 4096);
  CHECK(c.num_hidden_layers == 36);
  CHECK(c.num_attention_heads == 32);
  CHECK(c.num_key_value_heads == 8);
  CHECK(c.head_dim == 128);
  CHECK(c.rotary_ndims == 128);
  CHECK(c.intermediate_size == 12288);
  CHECK(c.vocab_size == 151936);
  CHECK(c.max_position_embeddings == 40960);
  CHECK(c.qk_norm);
  CHECK_FALSE(c.attention_bias);
  CHECK(c.gated_mlp);
  CHECK(c.hidden_act == Activation::Silu);
  CHECK(c.norm == NormKind::RmsNorm);
  CHECK(c.norm_eps == 1e-6);
  CHECK(c.rope_theta == 1e6);
  CHECK(c.rope_type == RopeType::Default);
  CHECK(c.sliding_window == 0);  // use_sliding_window false
  CHECK(c.layer_windows.empty());
  CHECK_FALSE(c.tie_word_embeddings);
  CHECK(c.torch_dtype == "bfloat16");
  CHECK(c.bos_token_ids == std::vector<int64_t>{151643});
  CHECK(c.eos_token_ids == std::vector<int64_t>{151645});

  const Dims full{4096, 12288, 151936, 32, 8, 128, 36};
  for (int tp : {1, 3, 8}) check_plan(config_path("qwen3-8b.config.json"), c, tp, [&](int t, int r) { return llama_shapes(full, t, r, kQwen3); });
}

TEST_CASE("Qwen3-8B config, 2 layers, shape-scaled (hidden 64, MLP 96): tpshard convert --tp 1,2,3") {
  json j = load("qwen3-8b.config.json");
  j["num_hidden_layers"] = 2;
  j["hidden_size"] = 64;
  j["intermediate_size"] = 96;
  const Dims d{64, 96, 151936, 32, 8, 128, 2};
  const Checkpoint ck = llama_checkpoint(d, false, {{"input_layernorm", d.hidden}, {"post_attention_layernorm", d.hidden},
                                                     {"self_attn.q_norm", 128}, {"self_attn.k_norm", 128}});
  // tp 3: heads 11 / 11 / 10, KV groups of 4 straddle the ranks (KV heads 0-2, 2-5, 5-7)
  CHECK(rank_part(d, 3, 1).kv_heads == 4);
  convert_and_check(j, ck, {1, 2, 3}, [&](int tp, int r) { return llama_shapes(d, tp, r, kQwen3); });
}

// ---- Phi-3-mini-4k-instruct (microsoft/Phi-3-mini-4k-instruct) ----

TEST_CASE("Phi-3-mini-4k-instruct config.json: 32 heads of 96 (MHA), fused qkv / gate_up, sliding window 2047 on every layer") {
  const ModelConfig c = parse_hf_config(load("phi-3-mini-4k-instruct.config.json"), "phi-3-mini");
  CHECK(c.arch == Arch::Phi3);
  CHECK(c.hidden_size == 3072);
  CHECK(c.num_hidden_layers == 32);
  CHECK(c.num_attention_heads == 32);
  CHECK(c.num_key_value_heads == 32);
  CHECK(c.head_dim == 96);
  CHECK(c.rotary_ndims == 96);
  CHECK(c.intermediate_size == 8192);
  CHECK(c.vocab_size == 32064);
  CHECK(c.max_position_embeddings == 4096);
  CHECK(c.rope_type == RopeType::Default);  // rope_scaling null
  CHECK(c.rope_theta == 10000.0);
  CHECK(c.sliding_window == 2047);
  CHECK(c.layer_windows == std::vector<int64_t>(32, 2047));
  CHECK(c.norm_eps == 1e-5);
  CHECK(c.gated_mlp);
  CHECK(c.hidden_act == Activation::Silu);
  CHECK_FALSE(c.attention_bias);
  CHECK_FALSE(c.mlp_bias);
  CHECK_FALSE(c.tie_word_embeddings);
  CHECK(c.torch_dtype == "bfloat16");
  CHECK(c.bos_token_ids == std::vector<int64_t>{1});
  CHECK(c.eos_token_ids == std::vector<int64_t>{32000});

  const Dims full{3072, 8192, 32064, 32, 32, 96, 32};
  for (int tp : {2, 3}) check_plan(config_path("phi-3-mini-4k-instruct.config.json"), c, tp, [&](int t, int r) { return llama_shapes(full, t, r, kPhi3); });
}

TEST_CASE("Phi-3-mini-4k-instruct config, 2 layers, shape-scaled (hidden 256 = 32 heads of 8, MLP 384): tpshard convert --tp 1,2,3") {
  json j = load("phi-3-mini-4k-instruct.config.json");
  j["num_hidden_layers"] = 2;
  j["hidden_size"] = 256;
  j["intermediate_size"] = 384;
  const Dims d{256, 384, 32064, 32, 32, 8, 2};
  Checkpoint ck;
  ck.add("model.embed_tokens.weight", {d.vocab, d.hidden});
  for (int l = 0; l < 2; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    ck.add(p + "input_layernorm.weight", {d.hidden});
    ck.add(p + "self_attn.qkv_proj.weight", {3 * d.hidden, d.hidden});
    ck.add(p + "self_attn.o_proj.weight", {d.hidden, d.hidden});
    ck.add(p + "post_attention_layernorm.weight", {d.hidden});
    ck.add(p + "mlp.gate_up_proj.weight", {2 * d.inter, d.hidden});
    ck.add(p + "mlp.down_proj.weight", {d.hidden, d.inter});
  }
  ck.add("model.norm.weight", {d.hidden});
  ck.add("lm_head.weight", {d.vocab, d.hidden});
  convert_and_check(j, ck, {1, 2, 3}, [&](int tp, int r) { return llama_shapes(d, tp, r, kPhi3); });
}

// ---- GPT-J-6B (EleutherAI/gpt-j-6b) ----

TEST_CASE("GPT-J-6B config.json: GPT-2 spellings, 16 heads of 256, rotary on 64 dims, n_inner null") {
  const ModelConfig c = parse_hf_config(load("gpt-j-6b.config.json"), "gpt-j-6b");
  CHECK(c.arch == Arch::GptJ);
  CHECK(c.hidden_size == 4096);
  CHECK(c.num_hidden_layers == 28);
  CHECK(c.num_attention_heads == 16);
  CHECK(c.num_key_value_heads == 16);
  CHECK(c.head_dim == 256);
  CHECK(c.rotary_ndims == 64);  // rotary_dim
  CHECK(c.intermediate_size == 16384);  // n_inner null: 4 * n_embd
  CHECK(c.vocab_size == 50400);
  CHECK(c.max_position_embeddings == 2048);  // n_positions
  CHECK(c.norm == NormKind::LayerNorm);
  CHECK(c.norm_eps == 1e-5);
  CHECK(c.hidden_act == Activation::GeluTanh);  // gelu_new
  CHECK_FALSE(c.gated_mlp);
  CHECK(c.use_parallel_residual);
  CHECK_FALSE(c.attention_bias);
  CHECK_FALSE(c.attention_out_bias);
  CHECK(c.mlp_bias);
  CHECK_FALSE(c.tie_word_embeddings);
  CHECK(c.rope_theta == 10000.0);
  CHECK(c.torch_dtype.empty());  // the file has no torch_dtype
  CHECK(c.bos_token_ids == std::vector<int64_t>{50256});
  CHECK(c.eos_token_ids == std::vector<int64_t>{50256});

  const Dims full{4096, 16384, 50400, 16, 16, 256, 28};
  for (int tp : {2, 3}) check_plan(config_path("gpt-j-6b.config.json"), c, tp, [&](int t, int r) { return gptj_shapes(full, t, r); });
}

TEST_CASE("GPT-J-6B config, 2 layers, shape-scaled (n_embd 256 = 16 heads of 16, rotary_dim 4, n_inner 256): tpshard convert --tp 1,2,3") {
  json j = load("gpt-j-6b.config.json");
  j["n_layer"] = 2;
  j["n_embd"] = 256;
  j["rotary_dim"] = 4;  // a quarter of head_dim, as 64 of 256
  j["n_inner"] = 256;
  const Dims d{256, 256, 50400, 16, 16, 16, 2};
  Checkpoint ck;
  ck.add("transformer.wte.weight", {d.vocab, d.hidden});
  for (int l = 0; l < 2; ++l) {
    const std::string p = "transformer.h." + std::to_string(l) + ".";
    ck.add(p + "ln_1.weight", {d.hidden});
    ck.add(p + "ln_1.bias", {d.hidden});
    for (const char* n : {"q_proj", "k_proj", "v_proj", "out_proj"}) ck.add(p + "attn." + n + ".weight", {d.hidden, d.hidden});
    ck.add(p + "mlp.fc_in.weight", {d.inter, d.hidden});
    ck.add(p + "mlp.fc_in.bias", {d.inter});
    ck.add(p + "mlp.fc_out.weight", {d.hidden, d.inter});
    ck.add(p + "mlp.fc_out.bias", {d.hidden});
  }
  ck.add("transformer.ln_f.weight", {d.hidden});
  ck.add("transformer.ln_f.bias", {d.hidden});
  ck.add("lm_head.weight", {d.vocab, d.hidden});
  ck.add("lm_head.bias", {d.vocab});
  CHECK(parse_hf_config(j, "scaled").rotary_ndims == 4);
  convert_and_check(j, ck, {1, 2, 3}, [&](int tp, int r) { return gptj_shapes(d, tp, r); });
}

// ---- Falcon-7B (tiiuae/falcon-7b-instruct) ----

TEST_CASE("Falcon-7B-instruct config.json: 71 heads, multi-query, parallel attention with one shared norm, tied") {
  const ModelConfig c = parse_hf_config(load("falcon-7b-instruct.config.json"), "falcon-7b");
  CHECK(c.arch == Arch::Falcon);
  CHECK(c.hidden_size == 4544);
  CHECK(c.num_hidden_layers == 32);
  CHECK(c.num_attention_heads == 71);
  CHECK(c.num_key_value_heads == 1);  // multi_query
  CHECK(c.head_dim == 64);
  CHECK(c.rotary_ndims == 64);
  CHECK(c.intermediate_size == 4 * 4544);  // no ffn_hidden_size
  CHECK(c.max_position_embeddings == 2048);  // absent: FalconConfig's default
  CHECK(c.vocab_size == 65024);
  CHECK(c.norm == NormKind::LayerNorm);
  CHECK(c.norm_eps == 1e-5);
  CHECK(c.hidden_act == Activation::Gelu);
  CHECK_FALSE(c.gated_mlp);
  CHECK(c.use_parallel_residual);
  CHECK(c.shared_parallel_norm);  // input_layernorm feeds both branches
  CHECK_FALSE(c.attention_bias);
  CHECK_FALSE(c.mlp_bias);
  CHECK(c.tie_word_embeddings);
  CHECK(c.torch_dtype == "bfloat16");
  CHECK(c.eos_token_ids == std::vector<int64_t>{11});

  // the default is Falcon's: another architecture still needs the field
  json llama = load("phi-3-mini-4k-instruct.config.json");
  llama.erase("max_position_embeddings");
  CHECK_THROWS_WITH_AS(parse_hf_config(llama, "config.json"),
                       doctest::Contains("config.json: required field \"max_position_embeddings\" is missing"), Error);

  // tp 2 and 4: 71 heads split unevenly, the one KV head held by every rank
  const ParallelLayout l4 = make_parallel_layout(c, 4);
  CHECK(l4.tp(3).heads == Range{54, 71});
  CHECK(l4.tp(3).kv_heads == Range{0, 1});
  const Dims full{4544, 18176, 65024, 71, 1, 64, 32};
  for (int tp : {2, 4}) check_plan(config_path("falcon-7b-instruct.config.json"), c, tp, [&](int t, int r) { return falcon_shapes(full, t, r); });
}

TEST_CASE("Falcon-7B-instruct config, 2 layers, shape-scaled (hidden 284 = 71 heads of 4): tpshard convert --tp 1,2,3") {
  json j = load("falcon-7b-instruct.config.json");
  j["num_hidden_layers"] = 2;
  j["hidden_size"] = 284;  // the MLP is 4 x hidden_size (no ffn_hidden_size)
  const Dims d{284, 1136, 65024, 71, 1, 4, 2};
  Checkpoint ck;
  ck.add("transformer.word_embeddings.weight", {d.vocab, d.hidden});
  for (int l = 0; l < 2; ++l) {
    const std::string p = "transformer.h." + std::to_string(l) + ".";
    ck.add(p + "input_layernorm.weight", {d.hidden});
    ck.add(p + "input_layernorm.bias", {d.hidden});
    ck.add(p + "self_attention.query_key_value.weight", {(71 + 2) * 4, d.hidden});
    ck.add(p + "self_attention.dense.weight", {d.hidden, d.hidden});
    ck.add(p + "mlp.dense_h_to_4h.weight", {d.inter, d.hidden});
    ck.add(p + "mlp.dense_4h_to_h.weight", {d.hidden, d.inter});
  }
  ck.add("transformer.ln_f.weight", {d.hidden});
  ck.add("transformer.ln_f.bias", {d.hidden});
  convert_and_check(j, ck, {1, 2, 3}, [&](int tp, int r) { return falcon_shapes(d, tp, r); });
}

// ---- Gemma-2-9B and OLMo-2-1124-7B: their config.json fields written out (published_configs.h) ----

/// `tpshard plan` of a written-out config: it goes to CONFIG_DIR/config.json first.
void check_plan_json(const json& j, const ModelConfig& c, int tp, const std::function<Shapes(int tp, int r)>& shapes) {
  ScratchDir d;
  write_text(d / "config.json", j.dump(2));
  check_plan(d / "config.json", c, tp, shapes);
}

TEST_CASE("Gemma-2-9B config: per-rank weights of tpshard plan at tp 2 and 3 against the count from its fields") {
  const ModelConfig c = parse_hf_config(gemma2_9b(), "gemma2");
  CHECK(c.head_dim == 256);  // given apart from hidden_size 3584
  CHECK(c.tie_word_embeddings);  // Gemma2Config's default
  CHECK(c.layer_windows.size() == 42);
  const Dims full{3584, 14336, 256000, 16, 8, 256, 42};
  for (int tp : {2, 3}) check_plan_json(gemma2_9b(), c, tp, [&](int t, int r) { return llama_shapes(full, t, r, kGemma2); });
}

TEST_CASE("Gemma-2-9B config, 2 layers, shape-scaled (hidden 64, MLP 96; 16 heads of 256): tpshard convert --tp 1,2,3") {
  json j = gemma2_9b();
  j["num_hidden_layers"] = 2;
  j["hidden_size"] = 64;
  j["intermediate_size"] = 96;
  const Dims d{64, 96, 256000, 16, 8, 256, 2};
  CHECK(parse_hf_config(j, "scaled").layer_windows == std::vector<int64_t>{4096, 0});  // local, then global
  const Checkpoint ck = llama_checkpoint(d, true, {{"input_layernorm", d.hidden}, {"post_attention_layernorm", d.hidden},
                                                    {"pre_feedforward_layernorm", d.hidden}, {"post_feedforward_layernorm", d.hidden}});
  // tp 3: heads 6 / 5 / 5, KV groups of 2: KV heads 0-2, 2-5, 5-7
  CHECK(rank_part(d, 3, 1).kv_heads == 3);
  convert_and_check(j, ck, {1, 2, 3}, [&](int tp, int r) { return llama_shapes(d, tp, r, kGemma2); });
}

TEST_CASE("OLMo-2-1124-7B config: per-rank weights of tpshard plan at tp 2 and 3 against the count from its fields") {
  const ModelConfig c = parse_hf_config(olmo2_7b(), "olmo2");
  CHECK(c.head_dim == 128);
  CHECK(c.qk_norm_across_heads);
  const Dims full{4096, 11008, 100352, 32, 32, 128, 32};
  for (int tp : {2, 3}) check_plan_json(olmo2_7b(), c, tp, [&](int t, int r) { return llama_shapes(full, t, r, kOlmo2); });
}

TEST_CASE("OLMo-2-1124-7B config, 2 layers, shape-scaled (hidden 128 = 32 heads of 4, MLP 192): tpshard convert --tp 1,2,3") {
  json j = olmo2_7b();
  j["num_hidden_layers"] = 2;
  j["hidden_size"] = 128;
  j["intermediate_size"] = 192;
  const Dims d{128, 192, 100352, 32, 32, 4, 2};
  // q / k norms over the whole projection (32 heads of 4)
  const Checkpoint ck = llama_checkpoint(d, false, {{"self_attn.q_norm", d.hidden}, {"self_attn.k_norm", d.hidden},
                                                     {"post_attention_layernorm", d.hidden}, {"post_feedforward_layernorm", d.hidden}});
  convert_and_check(j, ck, {1, 2, 3}, [&](int tp, int r) { return llama_shapes(d, tp, r, kOlmo2); });
}

// ---- StarCoder2-3B (bigcode/starcoder2-3b): its config.json fields written out (published_configs.h) ----

TEST_CASE("StarCoder2-3B config: GQA 24/2, sliding window 4096 on every layer, biases, LayerNorm, tied; tpshard plan at tp 2 and 3") {
  const ModelConfig c = parse_hf_config(starcoder2_3b(), "starcoder2-3b");
  CHECK(c.arch == Arch::Starcoder2);
  CHECK(c.hidden_size == 3072);
  CHECK(c.num_hidden_layers == 30);
  CHECK(c.num_attention_heads == 24);
  CHECK(c.num_key_value_heads == 2);
  CHECK(c.head_dim == 128);
  CHECK(c.rotary_ndims == 128);
  CHECK(c.intermediate_size == 12288);
  CHECK(c.vocab_size == 49152);
  CHECK(c.max_position_embeddings == 16384);
  CHECK(c.sliding_window == 4096);
  CHECK(c.layer_windows == std::vector<int64_t>(30, 4096));
  CHECK(c.norm == NormKind::LayerNorm);
  CHECK(c.norm_eps == 1e-5);
  CHECK(c.hidden_act == Activation::GeluTanh);
  CHECK_FALSE(c.gated_mlp);
  CHECK(c.attention_bias);
  CHECK(c.attention_out_bias);
  CHECK(c.mlp_bias);
  CHECK(c.tie_word_embeddings);
  CHECK(c.rope_theta == 999999.4420358813);
  CHECK(c.torch_dtype.empty());
  CHECK(c.bos_token_ids == std::vector<int64_t>{0});
  CHECK(c.eos_token_ids == std::vector<int64_t>{0});

  const Dims full{3072, 12288, 49152, 24, 2, 128, 30};
  for (int tp : {2, 3}) check_plan_json(starcoder2_3b(), c, tp, [&](int t, int r) { return starcoder2_shapes(full, t, r); });
}

TEST_CASE("StarCoder2-3B config, 2 layers, shape-scaled (hidden 192 = 24 heads of 8, MLP 256): tpshard convert --tp 1,2,3") {
  json j = starcoder2_3b();
  j["num_hidden_layers"] = 2;
  j["hidden_size"] = 192;
  j["intermediate_size"] = 256;
  const Dims d{192, 256, 49152, 24, 2, 8, 2};
  Checkpoint ck;
  ck.add("model.embed_tokens.weight", {d.vocab, d.hidden});
  for (int l = 0; l < 2; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    for (const char* n : {"input_layernorm", "post_attention_layernorm"}) {
      ck.add(p + n + ".weight", {d.hidden});
      ck.add(p + n + ".bias", {d.hidden});
    }
    for (const auto& [n, rows] : std::vector<std::pair<std::string, int64_t>>{{"q_proj", 24 * 8}, {"k_proj", 2 * 8}, {"v_proj", 2 * 8}}) {
      ck.add(p + "self_attn." + n + ".weight", {rows, d.hidden});
      ck.add(p + "self_attn." + n + ".bias", {rows});
    }
    ck.add(p + "self_attn.o_proj.weight", {d.hidden, d.hidden});
    ck.add(p + "self_attn.o_proj.bias", {d.hidden});
    ck.add(p + "mlp.c_fc.weight", {d.inter, d.hidden});
    ck.add(p + "mlp.c_fc.bias", {d.inter});
    ck.add(p + "mlp.c_proj.weight", {d.hidden, d.inter});
    ck.add(p + "mlp.c_proj.bias", {d.hidden});
  }
  ck.add("model.norm.weight", {d.hidden});
  ck.add("model.norm.bias", {d.hidden});
  // tp 3: heads 8 / 8 / 8, KV groups of 12: rank 1's heads 8-15 fall in both groups
  CHECK(rank_part(d, 3, 1).kv_heads == 2);
  convert_and_check(j, ck, {1, 2, 3}, [&](int tp, int r) { return starcoder2_shapes(d, tp, r); });
}
