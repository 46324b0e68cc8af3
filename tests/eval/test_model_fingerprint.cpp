// test_model_fingerprint.cpp: resumed generate/eval jobs compare the model (model_xxh3, from the
// manifest's shard table_xxh3 values): the same model resumes, another conversion with other weights is
// refused before anything is written. Models: tests/fixtures/tiny-llama converted here (manifests only
// are used; the fake model generates).
#include <doctest/doctest.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "eval/batch_job.h"
#include "eval/generate_jsonl.h"
#include "convert/convert.h"
#include "format/error.h"
#include "format/safetensors.h"
#include "tests/eval/fake_model.h"

using namespace tpshard;
using namespace tpshard::eval;
namespace fs = std::filesystem;

namespace {

fs::path work_dir() {
  const fs::path d = fs::temp_directory_path() / ("tpshard_test_model_fp_" + std::to_string(::getpid()));
  fs::create_directories(d);
  return d;
}

/// Removes work_dir() when the test binary exits.
struct RemoveWorkDir {
  ~RemoveWorkDir() {
    std::error_code ec;
    fs::remove_all(fs::temp_directory_path() / ("tpshard_test_model_fp_" + std::to_string(::getpid())), ec);
  }
} remove_work_dir;

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

/// Convert tests/fixtures/tiny-llama (element 3 of model.norm.weight set to `norm3` when non-zero) to
/// work_dir()/NAME with `tps`; returns its manifest.
Manifest convert_tiny(const std::string& name, float norm3, std::vector<int> tps) {
  const fs::path hf = work_dir() / (name + "-hf"), out = work_dir() / name;
  fs::remove_all(hf);
  fs::remove_all(out);
  fs::copy(TPSHARD_TEST_FIXTURES "/tiny-llama", hf, fs::copy_options::recursive);
  if (norm3 != 0) {
    uint64_t off = 0;
    {
      SafetensorsFile f((hf / "model.safetensors").string());
      off = f.tensors().at("model.norm.weight").file_offset + 3 * 4;  // f32 fixture
    }
    std::fstream f(hf / "model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(off));
    f.write(reinterpret_cast<const char*>(&norm3), 4);
    REQUIRE(f.good());
  }
  ConvertOptions o;
  o.hf_dir = hf.string();
  o.out_dir = out.string();
  o.tp_sizes = std::move(tps);
  o.progress = false;
  convert_checkpoint(o);
  return load_manifest(out.string());
}

Error expect_error(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e;
  }
  FAIL("expected tpshard::Error");
  return Error("", "");
}

}  // namespace

TEST_CASE("model_fingerprint: from the source checkpoint and dtype; same weights agree, other weights differ") {
  const Manifest a = convert_tiny("a", 0, {1, 2});
  const Manifest a2 = convert_tiny("a2", 0, {1, 2});
  const Manifest a1 = convert_tiny("a1", 0, {1});
  const Manifest b = convert_tiny("b", 1.5f, {1, 2});
  const std::string fa = model_fingerprint(a);
  CHECK(fa.size() == 16);
  CHECK(model_fingerprint(a2) == fa);
  CHECK(model_fingerprint(a1) == fa);  // which layouts exist does not matter
  CHECK(model_fingerprint(b) != fa);
  Manifest other_dtype = a;
  other_dtype.dtype = DType::BF16;
  CHECK(model_fingerprint(other_dtype) != fa);
  // The older form (shard tables) differs between layouts and is still computed for older result files.
  CHECK(legacy_model_fingerprint(a) != legacy_model_fingerprint(a1));
  CHECK(legacy_model_fingerprint(a) != fa);
  // Without source hashes (--no-source-hash) the shard tables are the identity.
  Manifest unhashed = a;
  for (auto& f : unhashed.source) f.xxh3 = 0;
  CHECK(model_fingerprint(unhashed) == legacy_model_fingerprint(a));
  // ... and without table hashes either (older converter) there is none.
  for (auto& [tp, shards] : unhashed.shards)
    for (auto& sh : shards) sh.table_xxh3.reset();
  CHECK(model_fingerprint(unhashed).empty());
}

TEST_CASE("generate --input/--output: resuming with the same model reuses; another model is refused") {
  const Manifest a = convert_tiny("ra", 0, {1});
  const Manifest a2 = convert_tiny("ra2", 0, {1});
  const Manifest b = convert_tiny("rb", -2.0f, {1});
  test::ByteTokenizer tok;
  test::FakeRunner runner(3);
  RankContext ctx;
  ctx.runner = &runner;
  ctx.tokenizer = &tok;
  ctx.manifest = &a;
  ctx.model_dir = "model-a";
  SamplingParams defaults;
  defaults.max_new_tokens = 4;
  const std::string in = (work_dir() / "in.jsonl").string(), out = (work_dir() / "out.jsonl").string();
  fs::remove(out);
  std::ofstream(in) << "{\"prompt\": \"Hello\"}\n{\"prompt\": \"abc\"}\n";
  run_generate_jsonl(ctx, in, out, defaults, 2);
  const std::string first = slurp(out);
  std::istringstream lines(first);
  std::vector<nlohmann::json> js;
  for (std::string l; std::getline(lines, l);) js.push_back(nlohmann::json::parse(l));
  REQUIRE(js.size() == 2);
  for (const auto& j : js) CHECK(j["model_xxh3"] == model_fingerprint(a));

  SUBCASE("another conversion of the same weights resumes: nothing generated, file unchanged") {
    ctx.manifest = &a2;
    const int64_t before = runner.forwards;
    run_generate_jsonl(ctx, in, out, defaults, 2);
    CHECK(runner.forwards == before);
    CHECK(slurp(out) == first);
  }
  SUBCASE("a conversion with other weights: error naming the file and both hashes, file unchanged") {
    ctx.manifest = &b;
    ctx.model_dir = "model-b";
    const int64_t before = runner.forwards;
    const Error e = expect_error([&] { run_generate_jsonl(ctx, in, out, defaults, 2); });
    CHECK(std::string(e.what()) == out + ": was made with another model: its result for id 1 has model_xxh3 \"" +
                                       model_fingerprint(a) + "\", the model model-b has \"" + model_fingerprint(b) + "\"");
    CHECK(e.hint() == "delete " + out + " or choose another --output");
    CHECK(runner.forwards == before);
    CHECK(slurp(out) == first);
  }
  SUBCASE("lines written with the older fingerprint (shard tables) resume") {
    std::ofstream(out, std::ios::trunc) << [&] {
      std::string s;
      for (auto j : js) {
        j["model_xxh3"] = legacy_model_fingerprint(a);
        s += j.dump() + "\n";
      }
      return s;
    }();
    const int64_t before = runner.forwards;
    run_generate_jsonl(ctx, in, out, defaults, 2);
    CHECK(runner.forwards == before);
  }
  SUBCASE("lines of an older file (no model_xxh3) are not compared") {
    std::ofstream(out, std::ios::trunc) << [&] {
      std::string s;
      for (auto j : js) {
        j.erase("model_xxh3");
        s += j.dump() + "\n";
      }
      return s;
    }();
    ctx.manifest = &b;
    const int64_t before = runner.forwards;
    run_generate_jsonl(ctx, in, out, defaults, 2);
    CHECK(runner.forwards == before);
  }
}
