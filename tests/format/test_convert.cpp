// test_convert.cpp: convert_checkpoint round trips. The expected per-rank tensors are rebuilt here
// from the source tensors with an independent implementation of the layout rules in docs/FORMAT.md
// (Megatron column/row/vocab splits, GPT-NeoX QKV regrouping, q/k/v and gate/up fusion, KV-head
// replication, vocab padding), for every tp size 1..8, several tp sizes in one pass, dtype casts
// and both zstd codecs. Also the manifest round trip.
#include <doctest/doctest.h>

#include <cstdio>
#include <filesystem>
#include <functional>

#include "convert/convert.h"
#include "format/error.h"
#include "format/hash.h"
#include "model/manifest.h"
#include "model/memory_plan.h"
#include "model/parallel_layout.h"
#include "format/shard_file.h"
#include "tiny_checkpoint.h"

using namespace tpshard;
using namespace tpshard::test;
namespace fs = std::filesystem;

namespace {

using Vec = std::vector<float>;

Vec rows_of(const Mat& m, int64_t r0, int64_t n) {
  return Vec(m.v.begin() + r0 * m.cols(), m.v.begin() + (r0 + n) * m.cols());
}
Vec cols_of(const Mat& m, int64_t c0, int64_t n) {
  Vec out;
  for (int64_t r = 0; r < m.rows(); ++r)
    for (int64_t c = c0; c < c0 + n; ++c) out.push_back(m.at(r, c));
  return out;
}
Vec cat(std::initializer_list<Vec> parts) {
  Vec out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}
/// Vocab rows of rank r, zero-padded to vocab_per_rank rows.
Vec vocab_rows(const Mat& m, int64_t vocab, int tp, int r) {
  const int64_t vpr = (vocab + tp - 1) / tp, b = r * vpr, e = std::min<int64_t>(b + vpr, vocab);
  Vec out = e > b ? rows_of(m, b, e - b) : Vec{};
  out.resize(static_cast<size_t>(vpr * m.cols()), 0.0f);
  return out;
}

using Expected = std::map<std::string, Vec>;

/// Rank r's share [begin, end) of n items over tp ranks, the first n % tp ranks one more (docs/FORMAT.md).
std::pair<int64_t, int64_t> share(int64_t n, int tp, int r) {
  const int64_t base = n / tp, extra = n % tp, b = r * base + std::min<int64_t>(r, extra);
  return {b, b + base + (r < extra ? 1 : 0)};
}

/// Rank r's MLP columns: whole units of mlp_column_unit (tested in test_model_config.cpp).
std::pair<int64_t, int64_t> mlp_share(int64_t inter, int tp, int r) {
  const int64_t u = mlp_column_unit(inter, tp);
  const auto [b, e] = share(inter / u, tp, r);
  return {b * u, e * u};
}

Expected expected_llama(const TinyModel& m, const LlamaSpec& s, int tp, int r) {
  const auto& R = m.ref;
  Expected e;
  const int64_t hd = s.head_dim, group = s.heads / s.kv_heads;
  const auto [h0, h1] = share(s.heads, tp, r);
  const auto [i0, i1] = mlp_share(s.inter, tp, r);
  const int64_t hpr = h1 - h0, kv0 = h0 / group, kvpr = (h1 - 1) / group + 1 - kv0, ipr = i1 - i0;
  const bool qkv_bias = s.qwen2 || s.attention_bias, o_bias = !s.qwen2 && s.attention_bias;
  e["token_embd.weight"] = vocab_rows(R.at("model.embed_tokens.weight"), s.vocab, tp, r);
  for (int l = 0; l < s.layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".", b = "blk." + std::to_string(l) + ".";
    e[b + "attn_norm.weight"] = R.at(p + "input_layernorm.weight").v;
    for (std::string part : {"weight", "bias"}) {
      if (part == "bias" && !qkv_bias) continue;
      e[b + "attn_qkv." + part] = cat({rows_of(R.at(p + "self_attn.q_proj." + part), h0 * hd, hpr * hd),
                                       rows_of(R.at(p + "self_attn.k_proj." + part), kv0 * hd, kvpr * hd),
                                       rows_of(R.at(p + "self_attn.v_proj." + part), kv0 * hd, kvpr * hd)});
    }
    e[b + "attn_output.weight"] = cols_of(R.at(p + "self_attn.o_proj.weight"), h0 * hd, hpr * hd);
    if (o_bias) e[b + "attn_output.bias"] = R.at(p + "self_attn.o_proj.bias").v;
    e[b + "ffn_norm.weight"] = R.at(p + "post_attention_layernorm.weight").v;
    for (std::string part : {"weight", "bias"}) {
      if (part == "bias" && !s.mlp_bias) continue;
      e[b + "ffn_gate_up." + part] = cat({rows_of(R.at(p + "mlp.gate_proj." + part), i0, ipr),
                                          rows_of(R.at(p + "mlp.up_proj." + part), i0, ipr)});
    }
    e[b + "ffn_down.weight"] = cols_of(R.at(p + "mlp.down_proj.weight"), i0, ipr);
    if (s.mlp_bias) e[b + "ffn_down.bias"] = R.at(p + "mlp.down_proj.bias").v;
  }
  e["output_norm.weight"] = R.at("model.norm.weight").v;
  if (!s.tied) e["output.weight"] = vocab_rows(R.at("lm_head.weight"), s.vocab, tp, r);
  return e;
}

Expected expected_neox(const TinyModel& m, const NeoxSpec& s, int tp, int r) {
  const auto& R = m.ref;
  Expected e;
  const int64_t hd = s.head_dim;
  const auto [h0, h1] = share(s.heads, tp, r);
  const auto [i0, i1] = mlp_share(s.inter, tp, r);
  const int64_t hpr = h1 - h0, ipr = i1 - i0;
  e["token_embd.weight"] = vocab_rows(R.at("gpt_neox.embed_in.weight"), s.vocab, tp, r);
  for (int l = 0; l < s.layers; ++l) {
    const std::string p = "gpt_neox.layers." + std::to_string(l) + ".", b = "blk." + std::to_string(l) + ".";
    e[b + "attn_norm.weight"] = R.at(p + "input_layernorm.weight").v;
    e[b + "attn_norm.bias"] = R.at(p + "input_layernorm.bias").v;
    for (std::string part : {"weight", "bias"}) {
      // HF rows: view(heads, 3, head_dim, ...): q,k,v of head 0, then head 1, ...
      const Mat& qkv = R.at(p + "attention.query_key_value." + part);
      Vec v;
      for (int which = 0; which < 3; ++which)
        for (int64_t h = h0; h < h1; ++h) {
          const Vec rows = rows_of(qkv, (3 * h + which) * hd, hd);
          v.insert(v.end(), rows.begin(), rows.end());
        }
      e[b + "attn_qkv." + part] = v;
    }
    e[b + "attn_output.weight"] = cols_of(R.at(p + "attention.dense.weight"), h0 * hd, hpr * hd);
    e[b + "attn_output.bias"] = R.at(p + "attention.dense.bias").v;
    e[b + "ffn_norm.weight"] = R.at(p + "post_attention_layernorm.weight").v;
    e[b + "ffn_norm.bias"] = R.at(p + "post_attention_layernorm.bias").v;
    e[b + "ffn_up.weight"] = rows_of(R.at(p + "mlp.dense_h_to_4h.weight"), i0, ipr);
    e[b + "ffn_up.bias"] = rows_of(R.at(p + "mlp.dense_h_to_4h.bias"), i0, ipr);
    e[b + "ffn_down.weight"] = cols_of(R.at(p + "mlp.dense_4h_to_h.weight"), i0, ipr);
    e[b + "ffn_down.bias"] = R.at(p + "mlp.dense_4h_to_h.bias").v;
  }
  e["output_norm.weight"] = R.at("gpt_neox.final_layer_norm.weight").v;
  e["output_norm.bias"] = R.at("gpt_neox.final_layer_norm.bias").v;
  if (!s.tied) e["output.weight"] = vocab_rows(R.at("embed_out.weight"), s.vocab, tp, r);
  return e;
}

/// Round `v` through dtype `dt` (what a cast to dt stores).
Vec through(const Vec& v, DType dt) {
  std::vector<uint8_t> tmp(v.size() * dtype_size(dt));
  convert_elements(v.data(), DType::F32, tmp.data(), dt, v.size(), "ref");
  Vec out(v.size());
  convert_elements(tmp.data(), dt, out.data(), DType::F32, v.size(), "ref");
  return out;
}

/// Every rank of `tp` holds exactly the expected tensors, bit for bit.
void check_shards(const std::string& out, int tp, const std::function<Expected(int)>& expected, DType dt,
                  Codec codec = Codec::None) {
  const Manifest man = load_manifest(out);
  const auto& shards = shards_for(man, tp, out);
  REQUIRE(shards.size() == static_cast<size_t>(tp));
  for (int r = 0; r < tp; ++r) {
    CAPTURE(tp);
    CAPTURE(r);
    const ShardReader rd(out + "/" + shards[r].file);
    CHECK(rd.header().tp_rank == static_cast<uint32_t>(r));
    CHECK(rd.header().tp_size == static_cast<uint32_t>(tp));
    CHECK(rd.header().arena_bytes == shards[r].weight_bytes);
    CHECK(rd.file_bytes() == shards[r].bytes);
    const Expected e = expected(r);
    REQUIRE(rd.tensors().size() == e.size());
    for (const auto& t : rd.tensors()) {
      CAPTURE(t.name);
      REQUIRE(e.count(t.name) == 1);
      CHECK(t.dtype == dt);
      if (t.local_shape.size() == 2) CHECK(t.codec == codec);
      const Vec got = rd.read_tensor_f32(t.name);
      const Vec want = through(e.at(t.name), dt);
      REQUIRE(got.size() == want.size());
      CHECK(got == want);
    }
  }
}

ConvertOptions opts(const std::string& in, const std::string& out, std::vector<int> tps) {
  ConvertOptions o;
  o.hf_dir = in;
  o.out_dir = out;
  o.tp_sizes = std::move(tps);
  o.progress = false;
  o.threads = 3;
  return o;
}

}  // namespace

TEST_CASE("Llama-family round trip for every tp_size 1..8 (GQA, KV replication, vocab padding)") {
  for (int tp = 1; tp <= 8; ++tp) {
    CAPTURE(tp);
    LlamaSpec s;
    s.heads = 2 * tp;
    s.kv_heads = tp % 2 == 0 ? 2 : tp;  // even tp > 2: KV heads replicated across ranks
    s.inter = 840;                      // divisible by 1..8
    s.seed = 100 + tp;
    ScratchDir d;
    const TinyModel m = make_llama(s);
    m.save(d / "hf");
    convert_checkpoint(opts(d / "hf", d / "out", {tp}));
    check_shards(d / "out", tp, [&](int r) { return expected_llama(m, s, tp, r); }, s.dtype);
    // Concatenating rank slices of plain splits reproduces the source exactly.
    Vec embd, down;
    for (int r = 0; r < tp; ++r) {
      const ShardReader rd(d / ("out/tp" + std::to_string(tp) + "/rank" + std::to_string(r) + ".tps"));
      const Vec e = rd.read_tensor_f32("token_embd.weight");
      embd.insert(embd.end(), e.begin(), e.end());
      CHECK(rd.at("token_embd.weight").global_shape[0] == (s.vocab + tp - 1) / tp * tp);
    }
    embd.resize(static_cast<size_t>(s.vocab * s.hidden));
    CHECK(embd == m.ref.at("model.embed_tokens.weight").v);
  }
}

TEST_CASE("GPT-NeoX round trip for every tp_size 1..8 (per-head QKV regrouping)") {
  for (int tp = 1; tp <= 8; ++tp) {
    CAPTURE(tp);
    NeoxSpec s;
    s.heads = 2 * tp;
    s.inter = 840;
    s.tied = tp == 3;
    s.seed = 200 + tp;
    ScratchDir d;
    const TinyModel m = make_neox(s);
    m.save(d / "hf");
    convert_checkpoint(opts(d / "hf", d / "out", {tp}));
    check_shards(d / "out", tp, [&](int r) { return expected_neox(m, s, tp, r); }, s.dtype);
  }
}

TEST_CASE("uneven tp round trip: heads, KV groups and MLP columns that do not divide, several sizes in one pass") {
  LlamaSpec s;
  s.heads = 10;
  s.kv_heads = 2;  // KV groups of 5 query heads: straddle ranks at tp 3, 4, 6, 7
  s.hidden = 40;
  s.inter = 90;
  s.attention_bias = true;
  ScratchDir d;
  const TinyModel m = make_llama(s);
  m.save(d / "hf");
  convert_checkpoint(opts(d / "hf", d / "out", {3, 4, 6, 7, 10}));
  for (int tp : {3, 4, 6, 7, 10}) {
    CAPTURE(tp);
    check_shards(d / "out", tp, [&](int r) { return expected_llama(m, s, tp, r); }, s.dtype);
    // The manifest records the ranges, and the query heads' global extent counts each KV copy.
    const Manifest man = load_manifest(d / "out");
    int64_t rows = 0;
    for (const ManifestShard& sh : shards_for(man, tp, d / "out")) {
      REQUIRE(sh.ranges);
      rows += sh.ranges->heads.size() + 2 * sh.ranges->kv_heads.size();
    }
    const ShardReader rd(d / ("out/tp" + std::to_string(tp) + "/rank0.tps"));
    CHECK(rd.at("blk.0.attn_qkv.weight").global_shape[0] == rows * s.head_dim);
  }
  NeoxSpec n;
  n.heads = 5;
  n.inter = 70;
  ScratchDir e;
  const TinyModel nm = make_neox(n);
  nm.save(e / "hf");
  convert_checkpoint(opts(e / "hf", e / "out", {2, 3, 4, 5}));
  for (int tp : {2, 3, 4, 5}) check_shards(e / "out", tp, [&](int r) { return expected_neox(nm, n, tp, r); }, n.dtype);
}

TEST_CASE("several tp sizes in one pass; biases; tied embeddings; dtype cast; Qwen2") {
  ScratchDir d;
  LlamaSpec s;  // 8 heads, 2 KV heads
  s.attention_bias = true;
  s.mlp_bias = true;
  s.tied = true;
  s.dtype = DType::F32;
  const TinyModel m = make_llama(s);
  m.save(d / "hf");
  ConvertOptions o = opts(d / "hf", d / "out", {8, 1, 4, 2});
  o.dtype = "bf16";
  const ConvertResult res = convert_checkpoint(o);
  CHECK(res.shards.size() == 15);
  for (int tp : {1, 2, 4, 8})
    check_shards(d / "out", tp, [&](int r) { return expected_llama(m, s, tp, r); }, DType::BF16);
  const Manifest man = load_manifest(d / "out");
  CHECK(man.dtype == DType::BF16);
  CHECK(man.model.vocab_size == 37);
  CHECK(man.shards.size() == 4);
  CHECK(fs::exists(d / "out/hf_config.json"));

  LlamaSpec q;
  q.qwen2 = true;
  q.heads = 4;
  const TinyModel qm = make_llama(q);
  qm.save(d / "qwen");
  convert_checkpoint(opts(d / "qwen", d / "qout", {1, 2, 4}));
  for (int tp : {1, 2, 4}) check_shards(d / "qout", tp, [&](int r) { return expected_llama(qm, q, tp, r); }, q.dtype);
}

TEST_CASE("zstd and zstd byte-plane shards decode to the uncompressed bytes") {
  ScratchDir d;
  LlamaSpec s;
  const TinyModel m = make_llama(s);
  m.save(d / "hf");
  for (Codec c : {Codec::Zstd, Codec::ZstdBytePlanes}) {
    CAPTURE(static_cast<int>(c));
    ConvertOptions o = opts(d / "hf", d / "z", {1, 2});
    o.codec = c;
    o.zstd_level = 5;
    o.force = true;
    convert_checkpoint(o);
    for (int tp : {1, 2}) check_shards(d / "z", tp, [&](int r) { return expected_llama(m, s, tp, r); }, s.dtype, c);
  }
}

TEST_CASE("manifest: saved fields load back; tokenizer files are copied; shards_for lists tp sizes") {
  ScratchDir d;
  NeoxSpec s;
  const TinyModel m = make_neox(s);
  m.save(d / "hf");
  write_text(d / "hf/tokenizer.json", "{\"model\": {}}");
  write_text(d / "hf/generation_config.json", "{\"eos_token_id\": [0, 5], \"bos_token_id\": 0}");
  write_text(d / "hf/chat_template.jinja", "{% for m in messages %}{{ m.content }}{% endfor %}");
  const ConvertResult res = convert_checkpoint(opts(d / "hf", d / "out", {1, 4}));
  const Manifest a = res.manifest, b = load_manifest(d / "out");
  CHECK(b.format_version == 1);
  CHECK(b.tool_version == tool_version());
  REQUIRE(b.source.size() == 2);
  CHECK(b.source[0].name == "model.safetensors");
  CHECK(b.source[0].bytes == fs::file_size(d / "hf/model.safetensors"));
  CHECK(b.source[0].xxh3 == a.source[0].xxh3);
  CHECK(b.source[0].xxh3 != 0);
  CHECK(b.source[1].name == "config.json");
  CHECK(b.source[1].bytes == fs::file_size(d / "hf/config.json"));
  CHECK(b.source[1].xxh3 == xxh3_file(d / "hf/config.json"));
  CHECK(b.model.eos_token_ids == std::vector<int64_t>{0, 5});  // generation_config.json wins
  CHECK(model_config_to_json(b.model) == model_config_to_json(a.model));
  CHECK(b.tokenizer_files == std::vector<std::string>{"tokenizer.json", "generation_config.json", "chat_template.jinja"});
  CHECK(fs::exists(d / "out/tokenizer.json"));
  CHECK(fs::exists(d / "out/chat_template.jinja"));
  for (int tp : {1, 4})
    for (int r = 0; r < tp; ++r) {
      CHECK(b.shards.at(tp)[r].file == "tp" + std::to_string(tp) + "/rank" + std::to_string(r) + ".tps");
      CHECK(b.shards.at(tp)[r].xxh3 == a.shards.at(tp)[r].xxh3);
      CHECK(b.shards.at(tp)[r].weight_bytes == a.shards.at(tp)[r].weight_bytes);
    }
  CHECK_THROWS_WITH_AS(shards_for(b, 2, d / "out"), doctest::Contains("no shards for tp_size 2 (it has tp 1, 4)"), Error);
  // save -> load is the identity on what it stores.
  save_manifest(b, d / "out");
  const Manifest c = load_manifest(d / "out");
  CHECK(c.shards.at(4)[3].bytes == b.shards.at(4)[3].bytes);
  CHECK(c.dtype == b.dtype);
  // Unsupported format version is refused.
  std::string text = read_text(d / "out/manifest.json");
  text.replace(text.find("\"format_version\": 1"), 19, "\"format_version\": 9");
  write_text(d / "out/manifest.json", text);
  CHECK_THROWS_WITH_AS(load_manifest(d / "out"), doctest::Contains("format_version 9 is not supported"), Error);
}

TEST_CASE("manifest table_xxh3: convert records each shard's table hash; check_shard_belongs compares it") {
  ScratchDir d;
  LlamaSpec s;
  make_llama(s).save(d / "hf_a");
  s.seed = 2;  // same architecture, other weights
  make_llama(s).save(d / "hf_b");
  convert_checkpoint(opts(d / "hf_a", d / "a", {2}));
  convert_checkpoint(opts(d / "hf_b", d / "b", {2}));
  const Manifest a = load_manifest(d / "a"), b = load_manifest(d / "b");
  for (int r = 0; r < 2; ++r) {
    const ShardReader ra(d / ("a/tp2/rank" + std::to_string(r) + ".tps"));
    REQUIRE(a.shards.at(2)[r].table_xxh3.has_value());
    CHECK(*a.shards.at(2)[r].table_xxh3 == ra.header().table_xxh3);
    CHECK_NOTHROW(check_shard_belongs(ra, a.shards.at(2)[r], d / "a"));
  }
  // The manifest spells it as 16 hex digits and loads it back.
  CHECK(read_text(d / "a/manifest.json").find("\"table_xxh3\": \"" + hash_to_hex(*a.shards.at(2)[1].table_xxh3) + "\"") !=
        std::string::npos);
  // b's rank 1 in a's place: named with both hashes.
  const ShardReader rb(d / "b/tp2/rank1.tps");
  REQUIRE(rb.header().table_xxh3 != *a.shards.at(2)[1].table_xxh3);
  try {
    check_shard_belongs(rb, a.shards.at(2)[1], d / "a");
    FAIL("expected an Error");
  } catch (const Error& e) {
    CHECK(std::string(e.what()) == (d / "b/tp2/rank1.tps") + " does not belong to this model (manifest " + (d / "a") +
                                       "/manifest.json records table hash " + hash_to_hex(*a.shards.at(2)[1].table_xxh3) +
                                       ", the shard has " + hash_to_hex(rb.header().table_xxh3) + ")");
    CHECK(e.hint() == "re-run tpshard convert, or copy the whole converted directory");
  }
  // An older manifest without the field: loads, and the check says nothing.
  nlohmann::json j = nlohmann::json::parse(read_text(d / "a/manifest.json"));
  for (auto& e : j["tp"]["2"]) e.erase("table_xxh3");
  write_text(d / "a/manifest.json", j.dump(2));
  const Manifest old = load_manifest(d / "a");
  CHECK_FALSE(old.shards.at(2)[1].table_xxh3.has_value());
  CHECK_NOTHROW(check_shard_belongs(rb, old.shards.at(2)[1], d / "a"));
  // and saving it does not invent one.
  save_manifest(old, d / "a");
  CHECK(read_text(d / "a/manifest.json").find("table_xxh3") == std::string::npos);
}

TEST_CASE("manifest model_section_xxh3: a hand-edited model section is refused at load, naming the file") {
  ScratchDir d;
  LlamaSpec s;
  make_llama(s).save(d / "hf");
  convert_checkpoint(opts(d / "hf", d / "out", {1}));
  const std::string path = d / "out/manifest.json";
  nlohmann::json j = nlohmann::json::parse(read_text(path));
  REQUIRE(j.contains("model_section_xxh3"));
  CHECK(j["model_section_xxh3"] == hash_to_hex(model_section_xxh3(j["model"])));
  const Manifest a = load_manifest(d / "out");
  // Re-indented with other spacing: the same values, still loads.
  write_text(path, j.dump(4));
  CHECK_NOTHROW(load_manifest(d / "out"));
  // Numbers re-spelled by another JSON tool (jq writes 10000.0 as 10000): the same values, still loads.
  {
    std::string text = j.dump(2);
    const std::string theta = "\"rope_theta\": " + j["model"]["rope_theta"].dump();
    REQUIRE(j["model"]["rope_theta"].is_number_float());
    REQUIRE(text.find(theta) != std::string::npos);
    const double value = j["model"]["rope_theta"].get<double>();
    REQUIRE(value == static_cast<double>(static_cast<int64_t>(value)));
    text.replace(text.find(theta), theta.size(), "\"rope_theta\": " + std::to_string(static_cast<int64_t>(value)));
    const size_t eps = text.find("\"rms_norm_eps\": ");
    REQUIRE(eps != std::string::npos);
    const size_t eps_end = text.find_first_of(",\n}", eps);
    char spelled[40];
    std::snprintf(spelled, sizeof(spelled), "%.6E", j["model"]["rms_norm_eps"].get<double>());  // e.g. 1.000000E-05
    text.replace(eps, eps_end - eps, std::string("\"rms_norm_eps\": ") + spelled);
    write_text(path, text);
    REQUIRE(nlohmann::json::parse(text)["model"]["rope_theta"].is_number_integer());
    CHECK_NOTHROW(load_manifest(d / "out"));
  }
  // A malformed recorded hash names the field and both ways out.
  {
    nlohmann::json bad = j;
    bad["model_section_xxh3"] = "12345";
    write_text(path, bad.dump(2));
    try {
      load_manifest(d / "out");
      FAIL("expected an Error");
    } catch (const Error& e) {
      CHECK(std::string(e.what()) == path + " \"model_section_xxh3\": \"12345\" is not 16 hex digits");
      CHECK(std::string(e.hint()).find("delete the \"model_section_xxh3\" line") != std::string::npos);
    }
  }
  // A value changed by hand: refused with both hashes and the way out.
  nlohmann::json edited = j;
  edited["model"]["max_position_embeddings"] = a.model.max_position_embeddings * 2;
  write_text(path, edited.dump(2));
  try {
    load_manifest(d / "out");
    FAIL("expected an Error");
  } catch (const Error& e) {
    CHECK(std::string(e.what()) == path + ": the \"model\" section was changed after tpshard convert wrote it (recorded XXH3 " +
                                       j["model_section_xxh3"].get<std::string>() + ", now " +
                                       hash_to_hex(model_section_xxh3(edited["model"])) + ")");
    CHECK(std::string(e.hint()).find("delete the \"model_section_xxh3\" line") != std::string::npos);
  }
  // Deliberate edit: without the recorded hash the manifest loads with the new value.
  edited.erase("model_section_xxh3");
  write_text(path, edited.dump(2));
  const Manifest b = load_manifest(d / "out");
  CHECK(b.model.max_position_embeddings == a.model.max_position_embeddings * 2);
  // save_manifest records the hash of what it writes: loads back.
  save_manifest(b, d / "out");
  CHECK(nlohmann::json::parse(read_text(path)).contains("model_section_xxh3"));
  CHECK(load_manifest(d / "out").model.max_position_embeddings == b.model.max_position_embeddings);
}

TEST_CASE("planned_weight_bytes (tpshard plan before converting) equals every converted shard's weight_bytes") {
  LlamaSpec s;
  s.heads = 10;
  s.kv_heads = 2;
  s.hidden = 40;
  s.inter = 90;
  s.layers = 3;
  ScratchDir d;
  const TinyModel m = make_llama(s);
  m.save(d / "hf");
  ConvertOptions o = opts(d / "hf", d / "out", {1, 3, 4});
  o.pp_sizes = {1, 2, 3};
  o.dtype = "bf16";
  convert_checkpoint(o);
  const Manifest man = load_manifest(d / "out");
  auto check = [&](int pp, int tp, const std::vector<ManifestShard>& shards) {
    const ParallelLayout l = make_parallel_layout(man.model, tp, pp);
    for (const ManifestShard& sh : shards) {
      CAPTURE(sh.file);
      CHECK(planned_weight_bytes(man.model, l, sh.pp_stage, sh.tp_rank, DType::BF16) == sh.weight_bytes);
    }
  };
  for (const auto& [tp, shards] : man.shards) check(1, tp, shards);
  for (const auto& [key, shards] : man.pp_shards) check(key.first, key.second, shards);
  CHECK(man.pp_shards.size() == 6);
  // the plan from the config agrees with the plan from the converted directory
  const MemoryPlan a = plan_memory(man, 3, 4, 64, d / "out");
  const MemoryPlan b = plan_memory_for_config(man.model, DType::BF16, 3, 1, 4, 64);
  CHECK(a.total_bytes() == b.total_bytes());
  CHECK(largest_batch_that_fits([&](int64_t batch) { return plan_memory_for_config(man.model, DType::BF16, 3, 1, batch, 64); },
                                b.total_bytes()) >= 4);
}
