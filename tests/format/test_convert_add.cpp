// test_convert_add.cpp: `tpshard convert --add-tp`: layouts added to an existing conversion are
// byte-identical to those of a fresh conversion, the rest of OUT (other layouts, source fingerprint,
// tokenizer files) is untouched, and another checkpoint, config or dtype is refused with nothing written.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>

#include "model/manifest.h"
#include "tiny_checkpoint.h"

using namespace tpshard;
using namespace tpshard::test;
namespace fs = std::filesystem;

namespace {

std::string file_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

/// Every file under dir (relative path -> bytes).
std::map<std::string, std::string> tree(const std::string& dir) {
  std::map<std::string, std::string> t;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file()) t[fs::relative(e.path(), dir).string()] = file_bytes(e.path().string());
  return t;
}

}  // namespace

TEST_CASE("convert --add-tp: added layouts equal a fresh conversion's; OUT's other files untouched") {
  ScratchDir d;
  LlamaSpec s;
  make_llama(s).save(d / "hf");
  const std::string log = d / "log.txt";
  REQUIRE(run_tpshard("convert " + (d / "hf") + " -o " + (d / "fresh") + " --tp 1,2,3 --pp 1,2 -q", log) == 0);
  REQUIRE(run_tpshard("convert " + (d / "hf") + " -o " + (d / "out") + " --tp 1 -q", log) == 0);
  const Manifest before = load_manifest(d / "out");
  const auto tp1_before = file_bytes(d / "out/tp1/rank0.tps");

  REQUIRE(run_tpshard("convert " + (d / "hf") + " -o " + (d / "out") + " --add-tp 1,2,3 --pp 1,2", log) == 0);
  // the summary names what was added and what OUT now holds; its byte count is the added shards'
  const std::string summary = read_text(log);
  CHECK_MESSAGE(summary.find("LlamaForCausalLM bf16, added tp 2, 3, pp 2 x tp 1, pp 2 x tp 2, pp 2 x tp 3 (now tp 1, 2, 3, "
                             "pp 2 x tp 1, pp 2 x tp 2, pp 2 x tp 3): ") != std::string::npos,
                summary);
  CHECK_MESSAGE(summary.find(" of new shards on disk") != std::string::npos, summary);
  const Manifest after = load_manifest(d / "out");
  CHECK(manifest_layouts_text(after) == manifest_layouts_text(load_manifest(d / "fresh")));
  // Every shard file equals the fresh conversion's, and tp 1 was not rewritten.
  const auto fresh = tree(d / "fresh"), out = tree(d / "out");
  for (const auto& [rel, bytes] : fresh)
    if (rel.size() > 4 && rel.substr(rel.size() - 4) == ".tps") {
      INFO(rel);
      REQUIRE(out.count(rel) == 1);
      CHECK(out.at(rel) == bytes);
    }
  CHECK(out.at("tp1/rank0.tps") == tp1_before);
  CHECK(after.source.size() == before.source.size());
  CHECK(after.source[0].xxh3 == before.source[0].xxh3);
  CHECK(after.tool_version == before.tool_version);
  CHECK(after.shards.at(1)[0].table_xxh3 == before.shards.at(1)[0].table_xxh3);
  CHECK(after.shards.at(3).size() == 3);
  CHECK(after.pp_shards.count({2, 3}) == 1);
  CHECK(siblings_of(d / "out", ".tmp-").empty());
  CHECK(run_tpshard("verify " + (d / "out"), log) == 0);

  SUBCASE("a layout OUT holds is not written again; nothing to add exits 0 and says so") {
    REQUIRE(run_tpshard("convert " + (d / "hf") + " -o " + (d / "out") + " --add-tp 2", log) == 0);
    CHECK(read_text(log).find("already holds tp 2: not written again") != std::string::npos);
    CHECK(read_text(log).find("nothing to add") != std::string::npos);
    CHECK(tree(d / "out") == out);
  }
  SUBCASE("a leftover layout directory that the manifest does not list is replaced") {
    fs::create_directories(d / "out/tp4");
    std::ofstream(d / "out/tp4/rank0.tps") << "killed before the manifest was written";
    REQUIRE(run_tpshard("convert " + (d / "hf") + " -o " + (d / "out") + " --add-tp 4 -q", log) == 0);
    CHECK(run_tpshard("verify " + (d / "out") + " --tp 4", log) == 0);
  }
}

TEST_CASE("convert --add-tp: another checkpoint, config or dtype, or no conversion in OUT: refused, OUT untouched") {
  ScratchDir d;
  LlamaSpec s;
  make_llama(s).save(d / "hf");
  const std::string log = d / "log.txt";
  REQUIRE(run_tpshard("convert " + (d / "hf") + " -o " + (d / "out") + " --tp 1 -q", log) == 0);
  const auto out = tree(d / "out");

  SUBCASE("other weights of the same shapes") {
    LlamaSpec s2 = s;
    s2.seed = 7;
    make_llama(s2).save(d / "hf2");
    CHECK(run_tpshard("convert " + (d / "hf2") + " -o " + (d / "out") + " --add-tp 2", log) == 1);
    const std::string text = read_text(log);
    CHECK(text.find("error: " + (d / "hf2") + "/model.safetensors: XXH3 ") != std::string::npos);
    CHECK(text.find("(the weights changed)") != std::string::npos);
    CHECK(text.find("hint: add layouts only from the checkpoint") != std::string::npos);
  }
  SUBCASE("another config") {
    LlamaSpec s3 = s;
    s3.layers = 3;
    make_llama(s3).save(d / "hf3");
    CHECK(run_tpshard("convert " + (d / "hf3") + " -o " + (d / "out") + " --add-tp 2", log) == 1);
    CHECK(read_text(log).find("was converted from another config.json than the one given") != std::string::npos);
  }
  SUBCASE("another dtype") {
    CHECK(run_tpshard("convert " + (d / "hf") + " -o " + (d / "out") + " --add-tp 2 --dtype fp32", log) == 1);
    CHECK(read_text(log).find("error: " + (d / "out") + ": was converted to bf16, the added layouts would be f32") !=
          std::string::npos);
  }
  SUBCASE("no conversion at OUT") {
    CHECK(run_tpshard("convert " + (d / "hf") + " -o " + (d / "none") + " --add-tp 2", log) == 1);
    CHECK(read_text(log).find("no manifest.json, so there is no conversion to add layouts to") != std::string::npos);
    CHECK_FALSE(fs::exists(d / "none"));
  }
  SUBCASE("--add-tp with --tp or --force is a usage error") {
    CHECK(run_tpshard("convert " + (d / "hf") + " -o " + (d / "out") + " --add-tp 2 --tp 1", log) == 2);
    CHECK(run_tpshard("convert " + (d / "hf") + " -o " + (d / "out") + " --add-tp 2 --force", log) == 2);
  }
  CHECK(tree(d / "out") == out);
  CHECK(siblings_of(d / "out", ".tmp-").empty());
}
