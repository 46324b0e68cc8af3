// test_generation_defaults.cpp: generation_config.json sampling defaults (runtime/generation_defaults.h):
// parsing and range checks, what is applied and what a user's option keeps, and on the tprun binary:
// defaults applied equal the same values given as options, --generation-config none ignores the file.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "format/error.h"
#include "runtime/generation_defaults.h"
#include "tests/runtime/cli_run.h"

using namespace tpshard;
namespace fs = std::filesystem;

namespace {

std::string scratch(const std::string& name) {
  const std::string d = std::string(TPSHARD_TEST_OUT_DIR) + "/gen-defaults-" + name;
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

void write_generation_config(const std::string& dir, const std::string& json) {
  std::ofstream(dir + "/generation_config.json") << json;
}

}  // namespace

TEST_CASE("read_generation_defaults: the sampling fields present, null as absent, no file as none") {
  const std::string d = scratch("read");
  CHECK_FALSE(read_generation_defaults(d).temperature.has_value());
  write_generation_config(d, R"({"do_sample": true, "temperature": 0.6, "top_p": 0.9, "top_k": null,
                                 "repetition_penalty": 1.1, "max_new_tokens": 256, "bos_token_id": 1})");
  const GenerationDefaults g = read_generation_defaults(d);
  CHECK(*g.temperature == doctest::Approx(0.6f));
  CHECK(*g.top_p == doctest::Approx(0.9f));
  CHECK_FALSE(g.top_k.has_value());
  CHECK_FALSE(g.min_p.has_value());
  CHECK(*g.repetition_penalty == doctest::Approx(1.1f));
  CHECK(*g.max_new_tokens == 256);
}

TEST_CASE("read_generation_defaults: a value outside its range or of the wrong type names the file and field") {
  const std::string d = scratch("bad");
  const std::string path = d + "/generation_config.json";
  auto message = [&](const std::string& json) {
    write_generation_config(d, json);
    try {
      (void)read_generation_defaults(d);
    } catch (const Error& e) {
      CHECK(e.hint().find("--generation-config none") != std::string::npos);
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK(message(R"({"top_p": 2})") == path + ": \"top_p\" is 2, outside (0, 1]");
  CHECK(message(R"({"top_p": 0})") == path + ": \"top_p\" is 0, outside (0, 1]");
  CHECK(message(R"({"temperature": -1})") == path + ": \"temperature\" is -1, outside [0, inf)");
  CHECK(message(R"({"temperature": "hot"})") == path + ": \"temperature\" must be a number, not \"hot\"");
  CHECK(message(R"({"top_k": 2.5})") == path + ": \"top_k\" must be an integer");
  CHECK(message(R"({"max_new_tokens": 1e300})").find("\"max_new_tokens\" is 1e+300, outside") != std::string::npos);
  CHECK(message("[1]") == path + ": expected a JSON object");
  CHECK(message("{").find(path + ": not valid JSON") == 0);
}

TEST_CASE("apply_generation_defaults: fills what the user did not give and says what it applied") {
  GenerationDefaults g;
  g.temperature = 0.7f;
  g.top_k = 40;
  g.max_new_tokens = 12;
  SamplingParams p;
  p.temperature = 0.0f;
  CHECK(apply_generation_defaults(g, p, {"temperature"}) == "top_k=40 max_new_tokens=12");
  CHECK(p.temperature == 0.0f);
  CHECK(p.top_k == 40);
  CHECK(p.max_new_tokens == 12);
  CHECK(p.top_p == 1.0f);
  SamplingParams q;
  CHECK(apply_generation_defaults(GenerationDefaults{}, q, {}).empty());
}

TEST_CASE("tprun generate: generation_config.json defaults equal the same values given as options; none ignores them") {
  const std::string model = std::string(TPSHARD_TEST_OUT_DIR) + "/gen-defaults-stories260K";
  const std::string convert = std::string(TPSHARD_BIN_DIR) + "/tpshard convert " + TPSHARD_FIXTURES_DIR +
                              "/stories260K -o " + model + " --tp 1 --force -q >/dev/null";
  REQUIRE(std::system(convert.c_str()) == 0);
  write_generation_config(model, R"({"temperature": 1.5, "top_k": 20, "max_new_tokens": 24})");
  const std::string cap = std::string(TPSHARD_TEST_OUT_DIR) + "/gen-defaults-cli";
  const std::string base = model + " --device cpu generate --prompt \"Once upon\" --seed 3";
  const test::CliRun from_file = test::run_tprun(base, cap);
  REQUIRE(from_file.code == 0);
  CHECK(from_file.err.find("tprun: generation_config.json: temperature=1.5 top_k=20 max_new_tokens=24 (the model's "
                           "defaults; --generation-config none ignores them)\n") != std::string::npos);
  const test::CliRun explicit_options =
      test::run_tprun(base + " --temperature 1.5 --top-k 20 --max-new-tokens 24", cap);
  REQUIRE(explicit_options.code == 0);
  CHECK(explicit_options.err.find("generation_config.json:") == std::string::npos);  // every field given
  CHECK(from_file.out == explicit_options.out);
  const test::CliRun ignored = test::run_tprun(base + " --generation-config none", cap);
  const test::CliRun greedy = test::run_tprun(base + " --temperature 0 --max-new-tokens 128", cap);
  REQUIRE(ignored.code == 0);
  CHECK(ignored.err.find("generation_config.json:") == std::string::npos);
  CHECK(ignored.out == greedy.out);
  CHECK(ignored.out != from_file.out);
  // A user's option wins over the file, the rest still comes from it.
  const test::CliRun partly = test::run_tprun(base + " --temperature 0", cap);
  CHECK(partly.err.find("tprun: generation_config.json: top_k=20 max_new_tokens=24 (") != std::string::npos);
  // A bad file stops the run before loading, naming it.
  write_generation_config(model, R"({"top_p": 7})");
  const test::CliRun bad = test::run_tprun(base, cap);
  CHECK(bad.code == 1);
  CHECK(bad.err.find("error: " + model + "/generation_config.json: \"top_p\" is 7, outside (0, 1]") == 0);
}
