// test_bad_inputs.cpp: every malformed input gives one clear Error naming the file and the fix, and
// leaves nothing behind (no OUT, no OUT.tmp-*). Inputs are crafted here from a valid tiny checkpoint.
#include <doctest/doctest.h>

#include <cstring>
#include <filesystem>
#include <functional>

#include "convert/convert.h"
#include "format/error.h"
#include "format/safetensors.h"
#include "model/manifest.h"
#include "tiny_checkpoint.h"

using namespace tpshard;
using namespace tpshard::test;
namespace fs = std::filesystem;

namespace {

struct Failure {
  std::string what, hint;
};

/// Convert hf -> parent/out; expect an Error; check nothing was left in `parent` but `keep`.
Failure convert_fails(const std::string& hf, const ScratchDir& d, std::vector<int> tps = {1, 2}, bool allow_unused = false) {
  ConvertOptions o;
  o.hf_dir = hf;
  o.out_dir = d / "out";
  o.tp_sizes = tps;
  o.progress = false;
  o.allow_unused = allow_unused;
  Failure f;
  try {
    convert_checkpoint(o);
  } catch (const Error& e) {
    f = {e.what(), e.hint()};
  }
  CHECK_MESSAGE(!f.what.empty(), "conversion was expected to fail");
  for (const auto& e : fs::directory_iterator(d.path)) {
    const std::string n = e.path().filename().string();
    const std::string left = "left behind: " + n;
    CHECK_MESSAGE(n.rfind("out", 0) != 0, left);
  }
  return f;
}

std::string make_ok(const ScratchDir& d, TinyModel* keep = nullptr) {
  LlamaSpec s;
  TinyModel m = make_llama(s);
  m.save(d / "hf");
  if (keep) *keep = m;
  return d / "hf";
}

std::vector<uint8_t> slurp(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}
void spit(const std::string& p, const std::vector<uint8_t>& b) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

/// Rewrite the safetensors header text of `path` with `edit` applied (data unchanged).
void edit_header_text(const std::string& path, const std::function<void(std::string&)>& edit) {
  auto b = slurp(path);
  uint64_t n;
  std::memcpy(&n, b.data(), 8);
  std::string hs(b.begin() + 8, b.begin() + 8 + static_cast<long>(n));
  edit(hs);
  while (hs.size() % 8) hs += ' ';
  std::vector<uint8_t> out(8);
  const uint64_t m = hs.size();
  std::memcpy(out.data(), &m, 8);
  out.insert(out.end(), hs.begin(), hs.end());
  out.insert(out.end(), b.begin() + 8 + static_cast<long>(n), b.end());
  spit(path, out);
}

/// Rewrite the safetensors header of `path` as JSON with `edit` applied (data unchanged).
void edit_header(const std::string& path, const std::function<void(nlohmann::json&)>& edit) {
  edit_header_text(path, [&](std::string& hs) {
    nlohmann::json h = nlohmann::json::parse(hs);
    edit(h);
    hs = h.dump();
  });
}

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("truncated safetensors / header length beyond the file") {
  ScratchDir d;
  const std::string hf = make_ok(d), st = hf + "/model.safetensors";
  auto b = slurp(st);
  spit(st, std::vector<uint8_t>(b.begin(), b.end() - 100));
  Failure f = convert_fails(hf, d);
  CHECK(has(f.what, "model.safetensors: tensor "));
  CHECK(has(f.what, "outside the data area"));
  CHECK(has(f.hint, "corrupt or truncated"));
  spit(st, std::vector<uint8_t>(b.begin(), b.begin() + 5));
  CHECK(has(convert_fails(hf, d).what, "too short for a safetensors header"));
  auto c = b;
  const uint64_t huge = 1ull << 40;
  std::memcpy(c.data(), &huge, 8);
  spit(st, c);
  CHECK(has(convert_fails(hf, d).what, "header length 1099511627776 exceeds the safetensors limit of 100 MB"));
  const uint64_t past = b.size();  // under the limit, but beyond the end of the file
  std::memcpy(c.data(), &past, 8);
  spit(st, c);
  CHECK(has(convert_fails(hf, d).what, "is beyond the end of the file"));
  auto j = b;
  j[8] = '[';
  spit(st, j);
  CHECK(has(convert_fails(hf, d).what, "header is not valid JSON"));
}

TEST_CASE("offsets out of range or overlapping; byte length / dtype mismatches") {
  ScratchDir d;
  const std::string hf = make_ok(d), st = hf + "/model.safetensors";
  const auto orig = slurp(st);
  edit_header(st, [](auto& h) { h["model.norm.weight"]["data_offsets"][1] = 1u << 30; });
  CHECK(has(convert_fails(hf, d).what, "tensor model.norm.weight: data_offsets"));
  spit(st, orig);
  edit_header(st, [](auto& h) {
    // point lm_head's range at embed_tokens' (same size): overlap
    h["lm_head.weight"]["data_offsets"] = h["model.embed_tokens.weight"]["data_offsets"];
  });
  CHECK(has(convert_fails(hf, d).what, "two tensors overlap"));
  spit(st, orig);
  // a tensor listed twice in the header (as text: nlohmann would keep the last entry silently): refused
  edit_header_text(st, [](std::string& hs) {
    const nlohmann::json h = nlohmann::json::parse(hs);
    hs.insert(hs.rfind('}'), ",\"model.norm.weight\":" + h["model.norm.weight"].dump());
  });
  CHECK(has(convert_fails(hf, d).what, "model.safetensors: the header lists tensor \"model.norm.weight\" twice"));
  spit(st, orig);
  edit_header(st, [](auto& h) { h["model.norm.weight"]["shape"] = {17}; });  // 16 elements of bytes
  CHECK(has(convert_fails(hf, d).what, "model.norm.weight: 32 bytes for shape with 17 BF16 elements"));
  spit(st, orig);
  edit_header(st, [](auto& h) { h["model.norm.weight"]["dtype"] = "Q4"; });
  CHECK(has(convert_fails(hf, d).what, "unknown dtype \"Q4\""));
  spit(st, orig);
  edit_header(st, [](auto& h) {
    h["model.norm.weight"]["dtype"] = "I16";  // same byte size, unsupported for weights
  });
  Failure f = convert_fails(hf, d);
  CHECK(has(f.what, "model.norm.weight has dtype I16; supported: F32, F16, BF16"));
  spit(st, orig);
  edit_header(st, [](auto& h) {
    h["model.norm.weight"]["shape"] = {4, 4};  // right byte count, wrong shape
  });
  f = convert_fails(hf, d);
  CHECK(has(f.what, "model.norm.weight has shape [4, 4], config.json implies [16]"));
  CHECK(has(f.hint, "config.json belongs to these weights"));
}

TEST_CASE("0-dim and empty tensors: read correctly; as a required weight they are a shape error") {
  ScratchDir d;
  std::map<std::string, StEntry> t;
  t["scalar"] = {"F32", {}, {0, 0, 128, 63}};  // 1.0f
  t["empty"] = {"F16", {0, 16}, {}};
  write_safetensors(d / "x.safetensors", t);
  const SafetensorsFile f(d / "x.safetensors");
  CHECK(f.tensors().at("scalar").shape.empty());
  CHECK(f.tensors().at("scalar").bytes == 4);
  float one;
  std::memcpy(&one, f.tensors().at("scalar").data, 4);
  CHECK(one == 1.0f);
  CHECK(f.tensors().at("empty").bytes == 0);

  const std::string hf = make_ok(d), st = hf + "/model.safetensors";
  const auto orig = slurp(st);
  edit_header(st, [](auto& h) {
    auto off = h["model.norm.weight"]["data_offsets"];
    h["model.norm.weight"]["shape"] = nlohmann::json::array();
    h["model.norm.weight"]["dtype"] = "F32";
    h["model.norm.weight"]["data_offsets"] = {off[0], off[0].template get<uint64_t>() + 4};
  });
  CHECK(has(convert_fails(hf, d).what, "model.norm.weight has shape [], config.json implies [16]"));
  spit(st, orig);
  edit_header(st, [](auto& h) {
    auto off = h["model.norm.weight"]["data_offsets"];
    h["model.norm.weight"]["shape"] = {0};
    h["model.norm.weight"]["data_offsets"] = {off[0], off[0]};
  });
  CHECK(has(convert_fails(hf, d).what, "model.norm.weight has shape [0], config.json implies [16]"));
}

TEST_CASE("missing required tensor; unknown extra tensors (error unless allow_unused)") {
  ScratchDir d;
  TinyModel m;
  std::string hf = make_ok(d, &m);
  TinyModel missing = m;
  missing.st.erase("model.layers.1.mlp.up_proj.weight");
  missing.save(hf);
  Failure f = convert_fails(hf, d);
  CHECK(has(f.what, "tensor model.layers.1.mlp.up_proj.weight (needed for blk.1.ffn_gate_up.weight) is missing"));
  TinyModel extra = m;
  extra.st["model.layers.0.self_attn.rotary_emb.inv_freq"] = {"F32", {2}, std::vector<uint8_t>(8)};  // known buffer: skipped
  extra.st["model.extra_head.weight"] = {"F32", {2}, std::vector<uint8_t>(8)};
  extra.st["vision.proj"] = {"F32", {1}, std::vector<uint8_t>(4)};
  extra.save(hf);
  f = convert_fails(hf, d);
  CHECK(has(f.what, "2 tensor(s) not used by LlamaForCausalLM: model.extra_head.weight, vision.proj"));
  CHECK(has(f.hint, "--allow-unused"));
  ConvertOptions o;
  o.hf_dir = hf;
  o.out_dir = d / "ok";
  o.progress = false;
  o.allow_unused = true;
  const ConvertResult r = convert_checkpoint(o);
  CHECK(r.ignored.size() == 3);
  CHECK(fs::exists(d / "ok/manifest.json"));
}

TEST_CASE("sharded checkpoints: index naming a missing file; index/shard disagreement; works when complete") {
  ScratchDir d;
  TinyModel m;
  const std::string hf = make_ok(d, &m);
  fs::remove(hf + "/model.safetensors");
  std::map<std::string, StEntry> a, b;
  nlohmann::json wm;
  for (const auto& [name, e] : m.st) {
    const bool first = name < "model.layers.1";
    (first ? a : b)[name] = e;
    wm[name] = first ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors";
  }
  write_safetensors(hf + "/model-00001-of-00002.safetensors", a);
  write_text(hf + "/model.safetensors.index.json", nlohmann::json{{"metadata", {{"total_size", 1}}}, {"weight_map", wm}}.dump());
  Failure f = convert_fails(hf, d);
  CHECK(has(f.what, "model.safetensors.index.json: names model-00002-of-00002.safetensors, which is not in"));
  CHECK(has(f.hint, "download the missing shard"));
  write_safetensors(hf + "/model-00002-of-00002.safetensors", b);
  ConvertOptions o;
  o.hf_dir = hf;
  o.out_dir = d / "good";
  o.tp_sizes = {2};
  o.progress = false;
  const ConvertResult r = convert_checkpoint(o);
  CHECK(r.manifest.source.size() == 3);  // two weight files and config.json
  wm["model.norm.weight"] = "model-00001-of-00002.safetensors";  // actually in file 2
  write_text(hf + "/model.safetensors.index.json", nlohmann::json{{"weight_map", wm}}.dump());
  CHECK(has(convert_fails(hf, d).what, "tensor model.norm.weight is listed in model-00001-of-00002.safetensors but that file does not hold it"));
  fs::remove(hf + "/model.safetensors.index.json");
  fs::remove(hf + "/model-00001-of-00002.safetensors");
  fs::remove(hf + "/model-00002-of-00002.safetensors");
  f = convert_fails(hf, d);
  CHECK(has(f.what, "no model.safetensors, model.safetensors.index.json, pytorch_model.bin or pytorch_model.bin.index.json"));
  CHECK(has(f.hint, "Hugging Face model directory"));
  write_text(hf + "/pytorch_model.bin", "x");  // read as torch.save's zip format (tests/format/test_torch_bin.cpp)
  f = convert_fails(hf, d);
  CHECK(has(f.what, "pytorch_model.bin: not a zip archive"));
  CHECK(has(f.hint, "safe_serialization=True"));
}

TEST_CASE("config problems: missing fields, unsupported architecture, more tp ranks than heads") {
  ScratchDir d;
  TinyModel m;
  const std::string hf = make_ok(d, &m);
  nlohmann::json c = m.config;
  c.erase("num_attention_heads");
  write_text(hf + "/config.json", c.dump());
  CHECK(has(convert_fails(hf, d).what, "config.json: required field \"num_attention_heads\" is missing"));
  c = m.config;
  c["architectures"] = {"T5ForConditionalGeneration"};
  write_text(hf + "/config.json", c.dump());
  Failure f = convert_fails(hf, d);
  CHECK(has(f.what, "unsupported architecture \"T5ForConditionalGeneration\""));
  CHECK(has(f.hint, "GPTNeoXForCausalLM"));
  write_text(hf + "/config.json", m.config.dump());
  f = convert_fails(hf, d, {1, 9});
  CHECK(has(f.what, "tp_size 9 is larger than num_attention_heads 8"));
  CHECK(has(f.hint, "between 1 and 8"));
  write_text(hf + "/config.json", "{ not json");
  CHECK(has(convert_fails(hf, d).what, "config.json: invalid JSON"));
  fs::remove(hf + "/config.json");
  CHECK(has(convert_fails(hf, d).what, "config.json: cannot open"));
}

TEST_CASE("output directory: existing OUT refused without force; force replaces only tpshard outputs; unwritable OUT") {
  ScratchDir d;
  const std::string hf = make_ok(d);
  ConvertOptions o;
  o.hf_dir = hf;
  o.out_dir = d / "out";
  o.progress = false;
  convert_checkpoint(o);
  CHECK_THROWS_WITH_AS(convert_checkpoint(o), doctest::Contains("out: already exists"), Error);
  o.force = true;
  o.tp_sizes = {2};
  convert_checkpoint(o);
  CHECK(fs::exists(d / "out/tp2/rank1.tps"));
  CHECK_FALSE(fs::exists(d / "out/tp1"));  // replaced, not merged
  for (const auto& e : fs::directory_iterator(d.path)) CHECK(e.path().filename().string().find(".old-") == std::string::npos);
  // --force never deletes a directory that is not a tpshard output.
  fs::create_directories(d / "precious");
  write_text(d / "precious/thesis.tex", "x");
  o.out_dir = d / "precious";
  CHECK_THROWS_WITH_AS(convert_checkpoint(o), doctest::Contains("is not a tpshard output directory"), Error);
  CHECK(fs::exists(d / "precious/thesis.tex"));
  // Unwritable: the parent of OUT is a regular file (fails for root too).
  write_text(d / "afile", "x");
  o.out_dir = d / "afile/out";
  o.force = false;
  try {
    convert_checkpoint(o);
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK(has(e.what(), "cannot create the temporary directory"));
    CHECK(has(e.hint(), "is writable"));
  }
}

TEST_CASE("narrowing overflow (f32 70000 -> fp16) is an error naming the tensor; nothing left") {
  ScratchDir d;
  LlamaSpec s;
  s.dtype = DType::F32;
  TinyModel m = make_llama(s);
  const float big = 70000.0f;
  std::memcpy(m.st["model.layers.1.mlp.down_proj.weight"].bytes.data() + 4 * 5, &big, 4);
  m.save(d / "hf");
  ConvertOptions o;
  o.hf_dir = d / "hf";
  o.out_dir = d / "out";
  o.dtype = "fp16";
  o.progress = false;
  CHECK_THROWS_WITH_AS(convert_checkpoint(o), doctest::Contains("model.layers.1.mlp.down_proj.weight: element 5 = 70000"), Error);
  for (const auto& e : fs::directory_iterator(d.path)) CHECK(e.path().filename().string().rfind("out", 0) != 0);
  o.dtype = "bf16";  // same range as f32: fine
  convert_checkpoint(o);
  CHECK(fs::exists(d / "out/manifest.json"));
}

TEST_CASE("multimodal checkpoint: an unprefixed language-model tensor, or no language model at all, is named") {
  ScratchDir d;
  const std::string hf = d / "nvlm";
  fs::create_directories(hf);
  for (const char* f : {"config.json", "model.safetensors"})
    fs::copy_file(std::string(TPSHARD_FIXTURES) + "/tiny-nvlm-d/" + f, hf + "/" + f);
  const std::string st = hf + "/model.safetensors";
  const auto orig_bytes = slurp(st);
  edit_header(st, [](auto& h) {  // one tensor without the language_model. prefix the others have
    h["model.norm.weight"] = h["language_model.model.norm.weight"];
    h.erase("language_model.model.norm.weight");
  });
  CHECK(has(convert_fails(hf, d).what, "tensor model.norm.weight is in the checkpoint without the language_model. prefix"));
  spit(st, orig_bytes);
  edit_header(st, [](auto& h) {  // only the vision tower
    for (auto it = h.begin(); it != h.end();)
      it = it.key().rfind("language_model.", 0) == 0 ? h.erase(it) : std::next(it);
  });
  CHECK(has(convert_fails(hf, d).what, "holds no tensor of its language model"));
}

TEST_CASE("a manifest.json nested thousands of levels deep is refused at parse time, naming the file") {
  ScratchDir d;
  const std::string deep = std::string(4000, '[') + std::string(4000, ']');
  write_text(d / "manifest.json", "{\"format\": \"tpshard\", \"x\": " + deep + "}");
  CHECK_THROWS_WITH_AS(load_manifest(d.path.string()), doctest::Contains("manifest.json: JSON nested deeper than 100 levels"),
                       Error);
}

TEST_CASE("a manifest.json integer field holding a float beyond its type (1e300) or a negative byte count is an Error, not a cast") {
  ScratchDir d;
  TinyModel m;
  ConvertOptions o;
  o.hf_dir = make_ok(d, &m);
  o.out_dir = d / "out";
  o.progress = false;
  convert_checkpoint(o);
  const std::string path = d / "out/manifest.json";
  const nlohmann::json good = nlohmann::json::parse(read_text(path));
  REQUIRE(good["tp"]["1"][0].contains("bytes"));
  for (const nlohmann::json& bad : {nlohmann::json(1e300), nlohmann::json(-5), nlohmann::json(2.5)}) {
    CAPTURE(bad.dump());
    nlohmann::json j = good;
    j["tp"]["1"][0]["bytes"] = bad;
    write_text(path, j.dump());
    CHECK_THROWS_WITH_AS(load_manifest((d / "out")), doctest::Contains("field \"bytes\" is not an integer in the range of its type"),
                         Error);
  }
  write_text(path, good.dump());
  CHECK(load_manifest(d / "out").shards.count(1) == 1);
}

TEST_CASE("fuzz regression: manifest.json whose shard \"bytes\" is 6103041e300 (tests/fixtures/fuzz)") {
  ScratchDir d;
  fs::copy_file(std::string(TPSHARD_FIXTURES) + "/fuzz/manifest_bytes_1e300.json", d / "manifest.json");
  CHECK_THROWS_WITH_AS(load_manifest(d.path.string()), doctest::Contains("field \"bytes\" is not an integer"), Error);
}
