// test_chat_template.cpp: runtime/chat_template against Hugging Face renderings.
// Expected strings come from transformers' apply_chat_template(tokenize=False) / its Jinja environment
// (tests/fixtures/smollm2/make_reference.py, tests/chat/make_cases.py); nothing here is hand-typed output.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "format/error.h"
#include "runtime/chat_template.h"

namespace fs = std::filesystem;
using tpshard::ChatMessage;
using tpshard::ChatTemplateKind;

namespace {

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  REQUIRE_MESSAGE(in.good(), "missing fixture " << path);
  return nlohmann::json::parse(in);
}

std::vector<ChatMessage> to_messages(const nlohmann::json& list) {
  std::vector<ChatMessage> out;
  for (const auto& m : list) out.push_back({m.at("role").get<std::string>(), m.at("content").get<std::string>()});
  return out;
}

/// A fresh empty directory under the system temp dir, removed at scope exit.
struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& name) : path(fs::temp_directory_path() / ("tpshard_test_chat_" + name)) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  void write(const std::string& file, const std::string& text) const { std::ofstream(path / file) << text; }
};

const std::string kSmolSystem = "You are a helpful AI assistant named SmolLM, trained by Hugging Face";

}  // namespace

TEST_CASE("SmolLM2 template is recognised as ChatML with its default system prompt") {
  const tpshard::ChatTemplate t = tpshard::load_chat_template(TPSHARD_SMOLLM2_FIXTURES);
  CHECK(t.kind == ChatTemplateKind::ChatML);
  CHECK(t.default_system == kSmolSystem);
}

TEST_CASE("SmolLM2 renderings match transformers apply_chat_template") {
  const nlohmann::json cases = read_json(std::string(TPSHARD_SMOLLM2_FIXTURES) + "/chat_template_cases.json");
  REQUIRE(cases.at("cases").size() >= 10);
  for (const auto& c : cases.at("cases")) {
    CAPTURE(c.at("name").get<std::string>());
    CAPTURE(c.at("add_generation_prompt").get<bool>());
    const std::string got = tpshard::apply_chat_template(TPSHARD_SMOLLM2_FIXTURES, to_messages(c.at("messages")),
                                                         c.at("add_generation_prompt").get<bool>());
    CHECK(got == c.at("rendered").get<std::string>());
  }
}

TEST_CASE("SmolLM2 reference prompts: chat-templated prompt text is what we render") {
  const nlohmann::json ref = read_json(std::string(TPSHARD_SMOLLM2_FIXTURES) + "/reference.json");
  int n_chat = 0;
  for (const auto& p : ref.at("prompts")) {
    if (p.at("kind") != "chat") continue;
    ++n_chat;
    CAPTURE(p.at("name").get<std::string>());
    CHECK(tpshard::apply_chat_template(TPSHARD_SMOLLM2_FIXTURES, to_messages(p.at("messages")), true) ==
          p.at("prompt").get<std::string>());
    // The generation prompt starts with <|im_start|> (id 1) and ends "assistant\n" (ids 520 9531 198).
    const auto& ids = p.at("prompt_ids");
    CHECK(ids.front() == 1);
    CHECK(ids.at(ids.size() - 3) == 520);
    CHECK(ids.back() == 198);
  }
  CHECK(n_chat >= 2);
}

TEST_CASE("Llama-2 and plain ChatML templates match the Jinja rendering, including its errors") {
  const nlohmann::json j = read_json(TPSHARD_CHAT_CASES);
  REQUIRE(j.at("cases").size() >= 10);
  for (const auto& c : j.at("cases")) {
    const std::string tname = c.at("template").get<std::string>();
    const auto& tj = j.at("templates").at(tname);
    const tpshard::ChatTemplate t = tpshard::parse_chat_template(
        tj.at("template"), tj.at("bos_token"), tj.at("eos_token"), "template_cases.json:" + tname);
    const ChatTemplateKind want = tname == "llama2"                ? ChatTemplateKind::Llama2
                                  : tname.rfind("llama3", 0) == 0 ? ChatTemplateKind::Llama3
                                                                  : ChatTemplateKind::ChatML;
    CHECK(t.kind == want);
    CHECK(t.default_system.empty());
    CAPTURE(tname);
    CAPTURE(c.at("name").get<std::string>());
    CAPTURE(c.at("add_generation_prompt").get<bool>());
    const auto messages = to_messages(c.at("messages"));
    const bool gen = c.at("add_generation_prompt").get<bool>();
    if (c.contains("error")) {
      CHECK_THROWS_AS(tpshard::render_chat(t, messages, gen), tpshard::Error);
    } else {
      CHECK(tpshard::render_chat(t, messages, gen) == c.at("rendered").get<std::string>());
    }
  }
}

TEST_CASE("templates we cannot render are refused, naming the file, with a --prompt hint") {
  const nlohmann::json j = read_json(TPSHARD_CHAT_CASES);
  REQUIRE(j.at("unsupported").size() >= 2);
  for (const auto& [name, text] : j.at("unsupported").items()) {
    CAPTURE(name);
    try {
      tpshard::parse_chat_template(text.get<std::string>(), "<s>", "</s>", "/models/x/tokenizer_config.json");
      FAIL("template was accepted");
    } catch (const tpshard::Error& e) {
      CHECK(std::string(e.what()).find("/models/x/tokenizer_config.json") != std::string::npos);
      CHECK(e.hint().find("--prompt") != std::string::npos);
    }
  }
}

TEST_CASE("an empty conversation is an error") {
  const tpshard::ChatTemplate t = tpshard::load_chat_template(TPSHARD_SMOLLM2_FIXTURES);
  CHECK_THROWS_AS(tpshard::render_chat(t, {}, true), tpshard::Error);
}

TEST_CASE("model dir problems name the file") {
  const nlohmann::json smol = read_json(std::string(TPSHARD_SMOLLM2_FIXTURES) + "/tokenizer_config.json");
  const std::string smol_template = smol.at("chat_template");
  const std::vector<ChatMessage> hi = {{"user", "hi"}};
  const std::string expected = "<|im_start|>system\n" + kSmolSystem +
                               "<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n";

  SUBCASE("missing tokenizer_config.json") {
    TempDir d("missing");
    CHECK_THROWS_WITH_AS(tpshard::apply_chat_template(d.path.string(), hi, true),
                         doctest::Contains("tokenizer_config.json"), tpshard::Error);
  }
  SUBCASE("no chat_template key") {
    TempDir d("nokey");
    d.write("tokenizer_config.json", R"({"bos_token": "<s>"})");
    CHECK_THROWS_WITH_AS(tpshard::apply_chat_template(d.path.string(), hi, true),
                         doctest::Contains("chat_template"), tpshard::Error);
  }
  SUBCASE("invalid JSON") {
    TempDir d("badjson");
    d.write("tokenizer_config.json", "{\"chat_template\": ");
    CHECK_THROWS_WITH_AS(tpshard::apply_chat_template(d.path.string(), hi, true),
                         doctest::Contains("not valid JSON"), tpshard::Error);
  }
  SUBCASE("chat_template as a list of named templates uses 'default'") {
    TempDir d("list");
    nlohmann::json cfg = {{"chat_template", nlohmann::json::array({{{"name", "tool_use"}, {"template", "{{ x }}"}},
                                                                   {{"name", "default"}, {"template", smol_template}}})}};
    d.write("tokenizer_config.json", cfg.dump());
    CHECK(tpshard::apply_chat_template(d.path.string(), hi, true) == expected);
  }
  SUBCASE("chat_template.jinja (transformers >= 4.43 layout) is read without tokenizer_config.json") {
    TempDir d("jinja");
    d.write("chat_template.jinja", smol_template);
    CHECK(tpshard::apply_chat_template(d.path.string(), hi, true) == expected);
  }
}
