// test_vectors.cpp: every case of llama.cpp's tokenizer vectors (mpt = GPT-NeoX-20B, gpt-2,
// llama-spm = Llama 2 through tokenizer.json and through tokenizer.model, smollm when its
// tokenizer fixture exists) must give exactly the expected ids (no BOS), and decode must give
// the text back where the reference tokenizer does.
#include <doctest/doctest.h>

#include <filesystem>
#include <sstream>

#include "tests/tokenizer/fixtures.h"
#include "tokenizer/config_files.h"
#include "tokenizer/spm_tokenizer.h"
#include "tokenizer/tokenizer.h"

namespace {

using tpshard::test::fixture;
using tpshard::test::slurp;

struct Case {
  std::string text;
  std::vector<int32_t> ids;
};

// Same reading as llama.cpp tests/test-tokenizer-0.cpp: the .inp holds each case followed by the
// separator line (so a case keeps its own leading/trailing newlines); the .out has one line of ids
// per case.
std::vector<Case> read_vectors(const std::string& name) {
  const std::string raw = slurp(fixture("vectors/" + name + ".inp"));
  std::ifstream out(fixture("vectors/" + name + ".out"));
  std::vector<std::string> lines;
  for (std::string line; std::getline(out, line);) lines.push_back(line);
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> inputs;
  size_t pos = 0;
  while (pos < raw.size()) {
    const size_t next = raw.find(sep, pos);
    if (next == std::string::npos) {
      inputs.push_back(raw.substr(pos));
      break;
    }
    inputs.push_back(raw.substr(pos, next - pos));
    pos = next + sep.size();
  }
  REQUIRE(inputs.size() == lines.size());
  std::vector<Case> cases;
  for (size_t i = 0; i < inputs.size(); ++i) {
    Case c{inputs[i], {}};
    std::istringstream is(lines[i]);
    for (int32_t id; is >> id;) c.ids.push_back(id);
    cases.push_back(std::move(c));
  }
  return cases;
}

void check_vectors(const tpshard::Tokenizer& tok, const std::string& name, size_t expected_cases, bool check_round_trip) {
  const auto cases = read_vectors(name);
  REQUIRE(cases.size() == expected_cases);
  for (const auto& c : cases) {
    CAPTURE(c.text);
    CHECK(tok.encode(c.text, false) == c.ids);
    if (check_round_trip) CHECK(tok.decode(c.ids) == c.text);
  }
}

}  // namespace

TEST_CASE("vectors: mpt (GPT-NeoX-20B tokenizer.json)") {
  auto tok = tpshard::Tokenizer::load(fixture("gpt-neox-20b"));
  check_vectors(*tok, "mpt", 46, true);
}

TEST_CASE("vectors: gpt-2 (tokenizer.json)") {
  auto tok = tpshard::Tokenizer::load(fixture("gpt2"));
  check_vectors(*tok, "gpt-2", 46, true);
}

TEST_CASE("vectors: llama-spm (Llama 2 tokenizer.json)") {
  auto tok = tpshard::Tokenizer::load(fixture("llama2"));
  // Llama 2 decode drops the leading space the normalizer adds, so " Hello" decodes to "Hello":
  // no exact round trip (the reference behaves the same; checked in test_behaviour.cpp).
  check_vectors(*tok, "llama-spm", 46, false);
}

TEST_CASE("vectors: llama-spm (Llama 2 tokenizer.model through sentencepiece)") {
  auto tok = tpshard::SpmTokenizer::from_file(fixture("llama2/tokenizer.model"), tpshard::TokenizerSideConfig{});
  check_vectors(*tok, "llama-spm", 46, false);
}

TEST_CASE("vectors: smollm (SmolLM2 tokenizer.json, when the fixture exists)") {
  // tests/fixtures/smollm2 is rebuilt from the GGUF by scripts/smollm2_to_hf.py (another suite's fixture).
  if (!std::filesystem::exists(tpshard::test::shared_fixture("smollm2/tokenizer.json"))) {
    MESSAGE("tests/fixtures/smollm2/tokenizer.json absent: smollm vectors skipped");
    return;
  }
  auto tok = tpshard::Tokenizer::load(tpshard::test::shared_fixture("smollm2"));
  check_vectors(*tok, "smollm", 46, true);
}
