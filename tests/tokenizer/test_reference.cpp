// test_reference.cpp: ids and decoded texts from the Hugging Face `tokenizers` package (and
// `sentencepiece` for tokenizer.model), committed as tests/fixtures/tokenizers/reference.json by
// make_reference.py: special tokens inside text, whitespace runs, code, many scripts, emoji and
// byte fallback, NFC/NFKC, invalid UTF-8 (reference = Python's errors="replace" text), added-token
// lstrip/rstrip/single_word/normalized flags, Split + ByteLevel, Metaspace, TemplateProcessing.
#include <doctest/doctest.h>

#include <filesystem>

#include <nlohmann/json.hpp>

#include "tests/tokenizer/fixtures.h"
#include "tokenizer/config_files.h"
#include "tokenizer/spm_tokenizer.h"
#include "tokenizer/tokenizer.h"

namespace {

using tpshard::test::fixture;
using tpshard::test::shared_fixture;

std::string from_hex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) out += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
  return out;
}

const nlohmann::json& reference() {
  static const nlohmann::json j = nlohmann::json::parse(tpshard::test::slurp(fixture("reference.json")));
  return j;
}

std::vector<std::string> texts() {
  std::vector<std::string> out;
  for (const auto& h : reference().at("texts_hex")) out.push_back(from_hex(h.get<std::string>()));
  return out;
}

void check_reference(const tpshard::Tokenizer& tok, const std::string& name, bool has_skip) {
  const auto& cases = reference().at("tokenizers").at(name);
  const auto inputs = texts();
  REQUIRE(cases.size() == inputs.size());
  size_t checked = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const auto& c = cases[i];
    if (c.is_null()) continue;
    CAPTURE(name);
    CAPTURE(i);
    CAPTURE(inputs[i]);
    const auto ids = c.at("ids").get<std::vector<int32_t>>();
    const auto ids_special = c.at("ids_special").get<std::vector<int32_t>>();
    CHECK(tok.encode(inputs[i], false) == ids);
    CHECK(tok.encode(inputs[i], true) == ids_special);
    if (has_skip) {
      CHECK(tok.decode(ids_special, false) == c.at("decoded").get<std::string>());
      CHECK(tok.decode(ids_special, true) == c.at("decoded_skip").get<std::string>());
    } else {
      CHECK(tok.decode(ids, false) == c.at("decoded").get<std::string>());
    }
    ++checked;
  }
  CHECK(checked > 0);

  // Random strings over an edge-case alphabet (make_reference.py fuzz_texts): ids with special
  // tokens, and decode of those ids (null in the file: decode gives the input back).
  if (!reference().at("fuzz").contains(name)) return;
  const auto& fuzz = reference().at("fuzz").at(name);
  const auto& fuzz_hex = reference().at("fuzz_hex");
  REQUIRE(fuzz.size() == fuzz_hex.size());
  size_t mismatches = 0;
  for (size_t i = 0; i < fuzz.size(); ++i) {
    const std::string text = from_hex(fuzz_hex[i].get<std::string>());
    const auto ids = fuzz[i].at("ids").get<std::vector<int32_t>>();
    const std::string expected_text = fuzz[i].at("decoded").is_null() ? text : fuzz[i].at("decoded").get<std::string>();
    const auto got = tok.encode(text, true);
    const bool ok = got == ids && tok.decode(ids, false) == expected_text;
    if (!ok && ++mismatches <= 3) {
      CAPTURE(name);
      CAPTURE(text);
      CHECK(got == ids);
      CHECK(tok.decode(ids, false) == expected_text);
    }
  }
  CHECK(mismatches == 0);
}

}  // namespace

TEST_CASE("reference: GPT-NeoX-20B tokenizer.json") {
  check_reference(*tpshard::Tokenizer::load(fixture("gpt-neox-20b")), "gpt-neox-20b", true);
}

TEST_CASE("reference: GPT-2 tokenizer.json") {
  check_reference(*tpshard::Tokenizer::load(fixture("gpt2")), "gpt2", true);
}

TEST_CASE("reference: Llama 2 tokenizer.json") {
  check_reference(*tpshard::Tokenizer::load(fixture("llama2")), "llama2", true);
}

TEST_CASE("reference: Llama 2 tokenizer.model through sentencepiece") {
  auto tok = tpshard::SpmTokenizer::from_file(fixture("llama2/tokenizer.model"), tpshard::TokenizerSideConfig{});
  check_reference(*tok, "llama2-sentencepiece", false);
}

TEST_CASE("Llama 2: tokenizer.model (sentencepiece) agrees with tokenizer.json on the fuzz texts") {
  auto spm = tpshard::SpmTokenizer::from_file(fixture("llama2/tokenizer.model"), tpshard::TokenizerSideConfig{});
  const auto& fuzz = reference().at("fuzz").at("llama2");
  const auto& fuzz_hex = reference().at("fuzz_hex");
  size_t mismatches = 0;
  for (size_t i = 0; i < fuzz.size(); ++i) {
    const std::string text = from_hex(fuzz_hex[i].get<std::string>());
    const auto ids = fuzz[i].at("ids").get<std::vector<int32_t>>();
    if (spm->encode(text, true) != ids && ++mismatches <= 3) {
      CAPTURE(text);
      CHECK(spm->encode(text, true) == ids);
    }
  }
  CHECK(mismatches == 0);
}

TEST_CASE("reference: synthetic byte-level (NFKC, Split regex, ignore_merges, added-token flags, template)") {
  check_reference(*tpshard::Tokenizer::load(fixture("synthetic-bytelevel")), "synthetic-bytelevel", true);
}

TEST_CASE("reference: synthetic Metaspace (prepend_scheme first, unk)") {
  check_reference(*tpshard::Tokenizer::load(fixture("synthetic-metaspace")), "synthetic-metaspace", true);
}

TEST_CASE("reference: stories260K and SmolLM2 model dirs (when present)") {
  for (const char* name : {"stories260K", "smollm2"}) {
    if (!std::filesystem::exists(shared_fixture(std::string(name) + "/tokenizer.json"))) {
      const std::string msg = std::string("tests/fixtures/") + name + "/tokenizer.json absent: skipped";
      MESSAGE(msg);
      continue;
    }
    // Loaded as a model dir: tokenizer_config.json (add_bos_token) agrees with the template.
    check_reference(*tpshard::Tokenizer::load(shared_fixture(name)), name, true);
  }
}
