// test_chat_template.cpp: runtime/chat_template and runtime/jinja against Python jinja2's renderings.
// Expected strings come from tests/chat/make_cases.py (jinja2 in transformers' apply_chat_template
// environment) and tests/fixtures/smollm2/make_reference.py (transformers itself); nothing here is
// hand-typed output except the limit and refusal checks.
#include <doctest/doctest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "format/error.h"
#include "runtime/chat_template.h"
#include "runtime/jinja/interpreter.h"

namespace fs = std::filesystem;
using tpshard::ChatMessage;
using ojson = nlohmann::ordered_json;
namespace jinja = tpshard::jinja;

namespace {

ojson read_json(const std::string& path) {
  std::ifstream in(path);
  REQUIRE_MESSAGE(in.good(), "missing fixture " << path);
  return ojson::parse(in);
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE_MESSAGE(in.good(), "missing fixture " << path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<ChatMessage> to_messages(const ojson& list) {
  std::vector<ChatMessage> out;
  for (const auto& m : list) out.push_back({m.at("role").get<std::string>(), m.at("content").get<std::string>()});
  return out;
}

/// JSON -> template value, keeping object key order (as Python's json.load does).
jinja::Value to_value(const ojson& j) {
  if (j.is_null()) return jinja::Value::none();
  if (j.is_boolean()) return jinja::Value::boolean(j.get<bool>());
  if (j.is_number_integer()) return jinja::Value::integer(j.get<int64_t>());
  if (j.is_number()) return jinja::Value::number(j.get<double>());
  if (j.is_string()) return jinja::Value::string(j.get<std::string>());
  if (j.is_array()) {
    jinja::ValueList l;
    for (const auto& e : j) l.push_back(to_value(e));
    return jinja::Value::list(std::move(l));
  }
  jinja::Dict d;
  for (const auto& [k, v] : j.items()) d.set(jinja::Value::string(k), to_value(v));
  return jinja::Value::dict(std::move(d));
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

std::string render_text(const std::string& text, const jinja::Dict& vars, const jinja::Limits& limits = {}) {
  return jinja::render(*jinja::compile(text, "test.jinja", limits), vars);
}

/// The Error message of rendering text ("" when it renders).
std::string render_error(const std::string& text, const jinja::Limits& limits = {}) {
  try {
    render_text(text, {}, limits);
  } catch (const tpshard::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("SmolLM2 template loads with its special tokens") {
  const tpshard::ChatTemplate t = tpshard::load_chat_template(TPSHARD_SMOLLM2_FIXTURES);
  CHECK(t.source == std::string(TPSHARD_SMOLLM2_FIXTURES) + "/tokenizer_config.json");
  CHECK(t.special_tokens.at("bos_token") == "<|im_start|>");
  CHECK(t.special_tokens.at("eos_token") == "<|im_end|>");
  CHECK(tpshard::render_chat(t, {{"user", "hi"}}, true) ==
        "<|im_start|>system\n" + kSmolSystem + "<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
}

TEST_CASE("SmolLM2 renderings match transformers apply_chat_template") {
  const ojson cases = read_json(std::string(TPSHARD_SMOLLM2_FIXTURES) + "/chat_template_cases.json");
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
  const ojson ref = read_json(std::string(TPSHARD_SMOLLM2_FIXTURES) + "/reference.json");
  int n_chat = 0;
  for (const auto& p : ref.at("prompts")) {
    if (p.at("kind") != "chat") continue;
    ++n_chat;
    CAPTURE(p.at("name").get<std::string>());
    CHECK(tpshard::apply_chat_template(TPSHARD_SMOLLM2_FIXTURES, to_messages(p.at("messages")), true) ==
          p.at("prompt").get<std::string>());
    const auto& ids = p.at("prompt_ids");
    CHECK(ids.front() == 1);  // <|im_start|>
    CHECK(ids.at(ids.size() - 3) == 520);
    CHECK(ids.back() == 198);  // "assistant\n"
  }
  CHECK(n_chat >= 2);
}

TEST_CASE("twelve real model templates render byte for byte as jinja2 does, including their raise_exception") {
  const ojson j = read_json(TPSHARD_CHAT_CASES);
  std::map<std::string, tpshard::ChatTemplate> templates;
  for (const auto& [name, t] : j.at("templates").items()) {
    const std::string path = std::string(TPSHARD_CHAT_TEMPLATES) + "/" + t.at("file").get<std::string>();
    std::map<std::string, std::string> tokens;
    for (const auto& [k, v] : t.at("special_tokens").items()) tokens[k] = v.get<std::string>();
    templates[name] = tpshard::parse_chat_template(read_text(path), tokens, path);
  }
  REQUIRE(templates.size() >= 10);
  std::map<std::string, int> equal, raised;
  size_t n = 0;
  for (const auto& c : j.at("cases")) {
    const std::string tname = c.at("template").get<std::string>();
    CAPTURE(tname);
    CAPTURE(c.at("name").get<std::string>());
    CAPTURE(c.at("add_generation_prompt").get<bool>());
    const auto messages = to_messages(c.at("messages"));
    const bool gen = c.at("add_generation_prompt").get<bool>();
    ++n;
    if (c.contains("error")) {
      const std::string want = c.at("error").get<std::string>();
      std::string got;
      try {
        got = tpshard::render_chat(templates.at(tname), messages, gen);
        FAIL("rendered instead of raising: " << got);
      } catch (const tpshard::Error& e) {
        CHECK_MESSAGE(std::string(e.what()).find(want) != std::string::npos, e.what());
        CHECK(std::string(e.what()).find(tname + ".jinja") != std::string::npos);
        ++raised[tname];
      }
    } else {
      const std::string got = tpshard::render_chat(templates.at(tname), messages, gen);
      CHECK(got == c.at("rendered").get<std::string>());
      if (got == c.at("rendered").get<std::string>()) ++equal[tname];
    }
  }
  CHECK(n >= 280);
  for (const auto& [name, t] : templates) {
    MESSAGE(name << ": " << equal[name] << " byte-equal renderings, " << raised[name] << " raise_exception cases");
    CHECK(equal[name] >= 10);
  }
}

TEST_CASE("feature templates: jinja2 semantics (scoping, whitespace, numbers, repr, filters, tests, errors)") {
  const ojson j = read_json(TPSHARD_CHAT_CASES);
  jinja::Dict vars;
  for (const auto& [k, v] : j.at("feature_variables").items()) vars.set(jinja::Value::string(k), to_value(v));
  size_t n = 0;
  for (const auto& f : j.at("features")) {
    const std::string text = f.at("template").get<std::string>();
    CAPTURE(text);
    ++n;
    if (f.contains("error")) {
      CHECK_THROWS_AS(render_text(text, vars), tpshard::Error);
    } else {
      std::string got;
      CHECK_NOTHROW(got = render_text(text, vars));
      CHECK(got == f.at("rendered").get<std::string>());
    }
  }
  CHECK(n >= 40);
}

TEST_CASE("raise_exception carries the template's message, file and line") {
  const std::string msg = render_error("line one\n{{ raise_exception('Only user and assistant roles!') }}");
  CHECK(msg.find("Only user and assistant roles!") != std::string::npos);
  CHECK(msg.find("test.jinja:2") != std::string::npos);
}

TEST_CASE("unsupported constructs are one Error naming the construct, the file and --chat-template") {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{% include 'other.jinja' %}", "{% include %}"},
      {"{% extends 'base' %}", "{% extends %}"},
      {"{% raw %}x{% endraw %}", "{% raw %}"},
      {"{% call f() %}x{% endcall %}", "{% call %}"},
      {"{% for m in messages recursive %}{% endfor %}", "recursive"},
      {"{{ messages|wordcount }}", "the filter |wordcount"},
      {"{{ x is escaped }}", "the test 'is escaped'"},
      {"{% do x.append(1) %}", "{% do %}"},
      {"{{ f(*args) }}", "*args"},
  };
  for (const auto& [text, construct] : cases) {
    CAPTURE(text);
    try {
      tpshard::parse_chat_template(text, "<s>", "</s>", "/models/x/tokenizer_config.json");
      FAIL("template was accepted");
    } catch (const tpshard::Error& e) {
      CHECK(std::string(e.what()).find("/models/x/tokenizer_config.json:1") != std::string::npos);
      CHECK(std::string(e.what()).find(construct) != std::string::npos);
      CHECK(e.hint().find("--chat-template FILE") != std::string::npos);
    }
  }
}

TEST_CASE("syntax errors name the file and line") {
  const std::vector<std::string> bad = {"{% for m in messages %}{{ m }}", "{{ 'unterminated }}", "{% if x %}{% endfor %}",
                                        "{{ x + }}", "{# open comment", "{{ (1 }}", "{% endif %}", "{% break %}",
                                        "{{ 99999999999999999999 }}", "{{ '\\x4' }}", "{% set %}", "{{ a ! b }}"};
  for (const std::string& text : bad) {
    CAPTURE(text);
    CHECK_THROWS_WITH_AS(jinja::compile("\n" + text, "bad.jinja"), doctest::Contains("bad.jinja:"), tpshard::Error);
  }
}

TEST_CASE("limits stop hostile templates quickly with an Error naming the limit") {
  jinja::Limits small;
  small.max_output_bytes = 1 << 16;
  small.max_loop_iterations = 10000;
  small.max_depth = 32;
  small.max_work_bytes = 1 << 20;
  const auto t0 = std::chrono::steady_clock::now();
  CHECK(render_error("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", small)
            .find("loop iterations") != std::string::npos);
  CHECK(render_error("{% for i in range(99999) %}x{% endfor %}", small).find("loop iterations") != std::string::npos);
  CHECK(render_error("{{ range(1000000) }}", small).find("Range too big") != std::string::npos);
  CHECK(render_error("{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s + ns.s %}{% endfor %}",
                     small).find("bytes") != std::string::npos);
  CHECK(render_error("{{ 'x' * 100000000000 }}", small).find("bytes") != std::string::npos);
  CHECK(render_error("{{ [1, 2] * 100000000000 }}", small).find("list items") != std::string::npos);
  CHECK(render_error("{% for i in range(4000) %}{{ 'abcdefgh' * 100 }}{% endfor %}", small).find("bytes") !=
        std::string::npos);
  CHECK(render_error("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", small).find("macro calls nested") !=
        std::string::npos);
  CHECK(render_error("{% macro f(n) %}{{ [[[[[[[[[[f(n + 1)]]]]]]]]]] }}{% endmacro %}{{ f(0) }}", small)
            .find("evaluation nested deeper") != std::string::npos);
  CHECK(render_error("{{ " + std::string(200, '(') + "1" + std::string(200, ')') + " }}", small).find("nested deeper") !=
        std::string::npos);
  std::string chain = "{{ 1";
  for (int i = 0; i < 100; ++i) chain += " + 1";
  CHECK(render_error(chain + " }}", small).find("nested deeper") != std::string::npos);
  std::string ifs;
  for (int i = 0; i < 100; ++i) ifs += "{% if true %}";
  CHECK(render_error(ifs, small).find("nested deeper") != std::string::npos);
  // Aliased lists: each level repeats the one below ten times; walking it would take exponential time.
  std::string alias = "{% set a = ['xxxxxxxxxx'] * 10 %}";
  for (char c = 'b'; c <= 'g'; ++c) alias += std::string("{% set ") + c + " = [" + static_cast<char>(c - 1) + "] * 10 %}";
  CHECK(render_error(alias + "{{ g }}", small).find("elements") != std::string::npos);
  CHECK(render_error(alias.substr(0, alias.find("{% set g")) + "{{ f }}", small).find("bytes") != std::string::npos);
  CHECK(render_error("{% set ns = namespace(l=[]) %}{% for i in range(300) %}{% set ns.l = [ns.l] %}{% endfor %}", small)
            .find("nested deeper than 256") != std::string::npos);
  CHECK(render_error("{% set ns = namespace() %}{% set ns.me = ns %}", small).find("cannot hold a namespace") !=
        std::string::npos);
  CHECK(render_error("{{ 9223372036854775807 + 1 }}", small).find("integer overflow") != std::string::npos);
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10));
  // The defaults leave room for real conversations: 4 MB of content renders.
  jinja::Dict vars;
  vars.set(jinja::Value::string("c"), jinja::Value::string(std::string(4u << 20, 'a')));
  CHECK(render_text("[{{ c }}]", vars).size() == (4u << 20) + 2);
}

TEST_CASE("an empty conversation is an error") {
  const tpshard::ChatTemplate t = tpshard::load_chat_template(TPSHARD_SMOLLM2_FIXTURES);
  CHECK_THROWS_AS(tpshard::render_chat(t, {}, true), tpshard::Error);
}

TEST_CASE("the built-in ChatML template") {
  CHECK(tpshard::render_chat(tpshard::chatml_template(), {{"user", "hi"}}, true) ==
        "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
}

TEST_CASE("model dir problems name the file; --chat-template overrides the model's template") {
  const ojson smol = read_json(std::string(TPSHARD_SMOLLM2_FIXTURES) + "/tokenizer_config.json");
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
  SUBCASE("--chat-template FILE replaces the template and keeps the model's special tokens") {
    TempDir d("override");
    d.write("tokenizer_config.json", R"({"bos_token": "<s>", "eos_token": "</s>", "chat_template": "{{ 'model' }}"})");
    const std::string file = std::string(TPSHARD_CHAT_TEMPLATES) + "/mistral-v0.2.jinja";
    const tpshard::ChatTemplate t = tpshard::load_chat_template(d.path.string(), file);
    CHECK(t.source == file);
    CHECK(tpshard::render_chat(t, {{"user", "hi"}, {"assistant", "yo"}}, false) == "<s>[INST] hi [/INST]yo</s>");
    CHECK(tpshard::render_chat(tpshard::load_chat_template(d.path.string(), ""), hi, false) == "model");
    CHECK_THROWS_WITH_AS(tpshard::load_chat_template(d.path.string(), "/nonexistent/t.jinja"),
                         doctest::Contains("/nonexistent/t.jinja"), tpshard::Error);
  }
}
