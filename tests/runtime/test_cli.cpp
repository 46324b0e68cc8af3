// test_cli.cpp: the tprun binary end to end on the CPU backend: `logits` JSON vs the HF reference,
// `generate` greedy text of stories260K, exit codes (1 for errors with error:/hint: lines, 2 for usage).
#include <doctest/doctest.h>

#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

using namespace std::string_literals;

namespace {

struct Run {
  int code;
  std::string out, err;
};

Run tprun(const std::string& args) {
  const std::string dir = std::string(TPSHARD_TEST_OUT_DIR) + "/cli";
  std::filesystem::create_directories(dir);
  const std::string cmd = std::string(TPSHARD_BIN_DIR) + "/tprun " + args + " >" + dir + "/out.txt 2>" + dir + "/err.txt";
  const int status = std::system(cmd.c_str());
  auto slurp = [](const std::string& p) {
    std::ifstream f(p);
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
  };
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, slurp(dir + "/out.txt"), slurp(dir + "/err.txt")};
}

std::string stories_dir() {
  std::filesystem::create_directories(TPSHARD_TEST_OUT_DIR);  // test cases may run in any order
  const std::string out = std::string(TPSHARD_TEST_OUT_DIR) + "/cli-stories260K";
  const std::string cmd = std::string(TPSHARD_BIN_DIR) + "/tpshard convert " + TPSHARD_FIXTURES_DIR +
                          "/stories260K -o " + out + " --tp 1,2 --force -q >/dev/null";
  REQUIRE(std::system(cmd.c_str()) == 0);
  return out;
}

}  // namespace

TEST_CASE("tprun logits prints the HF last-position logits as JSON") {
  const std::string dir = stories_dir();
  std::ifstream rf(std::string(TPSHARD_FIXTURES_DIR) + "/stories260K/reference.json");
  const auto ref = nlohmann::json::parse(rf);
  const auto ids = ref["prompts"][1].get<std::vector<int>>();
  const auto hf = ref["last_logits"][1].get<std::vector<float>>();
  std::string list;
  for (int id : ids) list += (list.empty() ? "" : ",") + std::to_string(id);
  const Run r = tprun(dir + " --tp 2 --device cpu logits --ids " + list);
  REQUIRE(r.code == 0);
  const auto j = nlohmann::json::parse(r.out);
  CHECK(j["ids"].get<std::vector<int>>() == ids);
  const auto logits = j["logits"].get<std::vector<float>>();
  REQUIRE(logits.size() == hf.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < hf.size(); ++i) {
    num = std::max(num, std::abs(static_cast<double>(logits[i]) - hf[i]));
    den = std::max(den, std::abs(static_cast<double>(hf[i])));
  }
  CHECK(num / den <= 1e-4);
  CHECK(r.err.find("backend cpu") != std::string::npos);
}

TEST_CASE("tprun generate: greedy text from BOS is llama2.c's published story; summary on stderr") {
  const std::string dir = stories_dir();
  std::ifstream ef(std::string(TPSHARD_FIXTURES_DIR) + "/stories260K/expected_greedy200.txt");
  std::stringstream es;
  es << ef.rdbuf();
  const std::string expected = es.str();
  const Run r = tprun(dir + " --tp 2 --device cpu generate --prompt '' --max-new-tokens 40");
  REQUIRE(r.code == 0);
  // The first 40 tokens' text is a prefix of the published 200-token text.
  std::string out = r.out;
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  CHECK(out.size() > 50);
  CHECK(expected.find(out) != std::string::npos);
  CHECK(r.err.find("tok/s") != std::string::npos);
  CHECK(r.err.find("peak RSS") != std::string::npos);
}

TEST_CASE("tprun exit codes: 1 with error/hint for errors, 2 for usage") {
  const std::string dir = stories_dir();
  Run r = tprun(dir + " --tp 4 --device cpu generate --prompt hi");
  CHECK(r.code == 1);
  CHECK(r.err.find("error: ") != std::string::npos);
  CHECK(r.err.find("hint: ") != std::string::npos);
  CHECK(r.err.find("1, 2") != std::string::npos);  // the tp sizes the manifest has

  r = tprun(dir + " --device cpu --max-seq-len 4 generate --prompt 'Once upon a time there was'");
  CHECK(r.code == 1);
  CHECK(r.err.find("--max-seq-len 4") != std::string::npos);

  r = tprun(dir + " generate --no-such-option");
  CHECK(r.code == 2);
  r = tprun(dir + " --tp 0 generate --prompt x");
  CHECK(r.code == 2);
}
