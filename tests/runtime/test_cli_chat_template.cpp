// test_cli_chat_template.cpp: --chat-template FILE on the tprun binary: chat and serve take the file
// instead of the model's template (stories260K has none), generate --input renders "messages" records with
// it; a template outside the supported subset, a missing file, or "messages" without any template are
// named before any weight loads.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <string>

#include "runtime/chat_template.h"
#include "tests/runtime/cli_run.h"

namespace {

using tpshard::test::CliRun;

CliRun run(const std::string& args) {
  return tpshard::test::run_tprun(args, std::string(TPSHARD_TEST_OUT_DIR) + "/cli-chat-template");
}

/// stories260K converted for tp 1 (its tokenizer_config.json has bos/eos tokens and no chat template).
std::string model() {
  static const std::string dir = [] {
    std::filesystem::create_directories(TPSHARD_TEST_OUT_DIR);
    const std::string out = std::string(TPSHARD_TEST_OUT_DIR) + "/cli-chat-template-stories260K";
    const std::string cmd = std::string(TPSHARD_BIN_DIR) + "/tpshard convert " + TPSHARD_FIXTURES_DIR +
                            "/stories260K -o " + out + " --tp 1 --force -q >/dev/null";
    REQUIRE(std::system(cmd.c_str()) == 0);
    return out;
  }();
  return dir;
}

const std::string kTiny = std::string(TPSHARD_FIXTURES_DIR) + "/chat_templates/tinyllama.jinja";

}  // namespace

TEST_CASE("tprun chat: --chat-template FILE replaces the model's (missing) template") {
  const std::string m = model() + " --device cpu --threads 1";
  CliRun r = run(m + " chat --prompt hi --max-new-tokens 2");
  CHECK(r.code == 1);
  CHECK(r.err.find("has no \"chat_template\"") != std::string::npos);
  CHECK(r.err.find("--chat-template FILE") != std::string::npos);

  r = run(m + " chat --prompt hi --max-new-tokens 2 --chat-template " + kTiny);
  CHECK_MESSAGE(r.code == 0, r.err);

  const std::string dir = std::string(TPSHARD_TEST_OUT_DIR) + "/cli-chat-template";
  std::ofstream(dir + "/include.jinja") << "{% for m in messages %}\n{% include 'turn.jinja' %}{% endfor %}";
  r = run(m + " chat --prompt hi --chat-template " + dir + "/include.jinja");
  CHECK(r.code == 1);
  CHECK(r.err.rfind("error: " + dir + "/include.jinja:2: chat template uses {% include %}", 0) == 0);
  CHECK(r.err.find("--chat-template FILE") != std::string::npos);

  r = run(m + " chat --prompt hi --chat-template " + dir + "/missing.jinja");
  CHECK(r.code == 1);
  CHECK(r.err.find(dir + "/missing.jinja") != std::string::npos);
}

TEST_CASE("tprun serve: --chat-template FILE is checked before the server starts") {
  const std::string dir = std::string(TPSHARD_TEST_OUT_DIR) + "/cli-chat-template";
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/bad.jinja") << "{{ messages | wordcount }}";
  const CliRun r = run(model() + " --device cpu serve --port 1 --chat-template " + dir + "/bad.jinja");
  CHECK(r.code == 1);
  CHECK(r.err.rfind("error: " + dir + "/bad.jinja:1: chat template uses the filter |wordcount", 0) == 0);
}

TEST_CASE("tprun generate --input: \"messages\" records rendered with --chat-template FILE") {
  const std::string dir = std::string(TPSHARD_TEST_OUT_DIR) + "/cli-chat-template";
  std::filesystem::create_directories(dir);
  const std::string in = dir + "/chat.jsonl", out = dir + "/chat_out.jsonl";
  std::filesystem::remove(out);
  std::ofstream(in) << R"({"id": "a", "messages": [{"role": "system", "content": "Be kind."}, {"role": "user", "content": "Tell me a story"}]})"
                    << "\n" << R"({"id": "b", "prompt": "Once upon a time"})" << "\n";
  const std::string m = model() + " --device cpu --threads 1";
  CliRun r = run(m + " generate --input " + in + " --output " + out + " --max-new-tokens 3");
  CHECK(r.code == 1);  // the model has no template: named with the line, before any weight loads
  CHECK(r.err.find(in + ":1: \"messages\" needs a chat template") != std::string::npos);

  r = run(m + " generate --input " + in + " --output " + out + " --max-new-tokens 3 --chat-template " + kTiny);
  REQUIRE_MESSAGE(r.code == 0, r.err);
  std::ifstream f(out);
  std::string first;
  std::getline(f, first);
  const nlohmann::json j = nlohmann::json::parse(first);
  CHECK(j["id"] == "a");
  // The tinyllama template with stories260K's eos_token "</s>".
  CHECK(j["prompt"] == "<|system|>\nBe kind.</s>\n<|user|>\nTell me a story</s>\n<|assistant|>\n");
  CHECK(j["prompt"] == tpshard::render_chat(tpshard::load_chat_template(model(), kTiny),
                                            {{"system", "Be kind."}, {"user", "Tell me a story"}}, true));
}
