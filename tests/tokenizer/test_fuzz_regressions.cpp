// test_fuzz_regressions.cpp: the tokenizer findings of the fuzz targets (fuzz/) and of the classes the
// targets look for, each as a test: the input is refused with an Error naming what is wrong, or handled
// correctly; never a crash, a hang or a huge allocation.
#include <doctest/doctest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "fixtures.h"
#include "format/error.h"
#include "tokenizer/tokenizer.h"

using tpshard::test::fixture;
using tpshard::test::shared_fixture;
using tpshard::test::slurp;

namespace {

std::string dir_with(const std::string& name, const std::string& json) {
  const auto dir = std::filesystem::temp_directory_path() / ("tpshard_fuzzreg_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "tokenizer.json") << json;
  return dir.string();
}

std::string with(const std::string& pre, const std::string& decoder, const std::string& vocab = R"({"a":0,"b":1,"ab":2})",
                 const std::string& added = "[]") {
  return R"({"version":"1.0","added_tokens":)" + added + R"(,"normalizer":null,"pre_tokenizer":)" + pre +
         R"(,"post_processor":null,"decoder":)" + decoder + R"(,"model":{"type":"BPE","vocab":)" + vocab +
         R"(,"merges":["a b"]}})";
}

std::string load_error(const std::string& name, const std::string& json) {
  try {
    tpshard::Tokenizer::load(dir_with(name, json));
  } catch (const tpshard::Error& e) {
    return e.what();
  }
  return "(loaded)";
}

}  // namespace

TEST_CASE("fuzz regression: a long word whose first pair merges (BPE heap path) encodes and round-trips") {
  auto tok = tpshard::Tokenizer::load(fixture("gpt-neox-20b"));
  REQUIRE(tok);
  const std::string text = slurp(shared_fixture("fuzz/bpe_heap_first_symbol.txt"));
  REQUIRE(text.size() > 100);
  const auto ids = tok->encode(text, false);
  CHECK(!ids.empty());
  CHECK(tok->decode(ids) == text);  // byte-level BPE: lossless
  // the heap path proper: a word longer than the small-word limit, merging from its first symbol
  const std::string word(300, 'a');
  CHECK(tok->decode(tok->encode(word, false)) == word);
}

TEST_CASE("fuzz regression: a Metaspace replacement that is not one character is refused (it would never advance)") {
  const std::string ok_decoder = R"({"type":"ByteLevel"})", ok_pre = R"({"type":"ByteLevel","add_prefix_space":false})";
  for (const std::string rep : {R"("")", R"("ab")", "7", R"(null)"}) {
    CAPTURE(rep);
    CHECK(load_error("ms_pre", with(R"({"type":"Metaspace","replacement":)" + rep + "}", ok_decoder))
              .find("Metaspace replacement") != std::string::npos);
    CHECK(load_error("ms_dec", with(ok_pre, R"({"type":"Metaspace","replacement":)" + rep + "}"))
              .find("Metaspace replacement") != std::string::npos);
  }
  // one character, also outside ASCII, is fine
  CHECK(load_error("ms_ok", with(R"({"type":"Metaspace","replacement":"\u2581"})", R"({"type":"Metaspace","replacement":"_"})")) ==
        "(loaded)");
}

TEST_CASE("fuzz regression: token ids out of range or not integers are refused before any table is sized") {
  const std::string pre = R"({"type":"ByteLevel","add_prefix_space":false})", dec = R"({"type":"ByteLevel"})";
  for (const std::string id : {"2147483647", "4194304", "1e10", "2.5", "-1", "18446744073709551615", R"("7")"}) {
    CAPTURE(id);
    CHECK(load_error("vocab_id", with(pre, dec, R"({"a":0,"b":1,"ab":)" + id + "}")).find("token id") != std::string::npos);
    CHECK(load_error("added_id", with(pre, dec, R"({"a":0,"b":1,"ab":2})",
                                      R"([{"id":)" + id + R"(,"content":"<x>","special":true}])"))
              .find("token id") != std::string::npos);
  }
}

TEST_CASE("fuzz regression: JSON nested thousands of levels deep is refused at parse time, naming the file") {
  const std::string deep = std::string(5000, '[') + std::string(5000, ']');
  const std::string e = load_error("deep", with(R"({"type":"ByteLevel","add_prefix_space":false})", R"({"type":"ByteLevel"})")
                                               .insert(1, R"("extra":)" + deep + ","));
  CHECK(e.find("nested deeper than") != std::string::npos);
  CHECK(e.find("tokenizer.json") != std::string::npos);
}

TEST_CASE("fuzz regression: an added token without \"content\" (or with a non-string one) is refused, naming added_tokens") {
  const std::string pre = "null", dec = "null";
  std::string e = load_error("added_no_content", with(pre, dec, R"({"a":0,"b":1,"ab":2})", R"([{"id":3,"special":true}])"));
  CHECK_MESSAGE(e.find("added_tokens: unexpected layout") != std::string::npos, e);
  CHECK_MESSAGE(e.find("'content' not found") != std::string::npos, e);
  e = load_error("added_int_content", with(pre, dec, R"({"a":0,"b":1,"ab":2})", R"([{"id":3,"content":7}])"));
  CHECK_MESSAGE(e.find("added_tokens: unexpected layout") != std::string::npos, e);
  e = load_error("added_not_object", with(pre, dec, R"({"a":0,"b":1,"ab":2})", R"([5])"));
  CHECK_MESSAGE(e.find("added_tokens") != std::string::npos, e);
  // the well-formed entry still loads
  CHECK(load_error("added_ok", with(pre, dec, R"({"a":0,"b":1,"ab":2})", R"([{"id":3,"content":"<s>","special":true}])")) ==
        "(loaded)");
}
