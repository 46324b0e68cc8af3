// test_cli.cpp: the tprun binary end to end on the CPU backend: `logits` JSON vs the HF reference,
// `generate` greedy text of stories260K (one prompt streamed; several printed in prompt order as each
// finishes), exit codes (1 for errors with error:/hint: lines, 2 for usage), file arguments checked
// before the model loads, bench-load without a GPU, where `eval triviaqa` writes by default.
#include <doctest/doctest.h>

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/session.h"
#include "tests/runtime/cli_run.h"

using namespace std::string_literals;

namespace {

using Run = tpshard::test::CliRun;

/// Runs `prefix tprun args` through the shell; prefix may be "cd DIR && " and/or a privilege drop.
Run tprun(const std::string& args, const std::string& prefix = "") {
  return tpshard::test::run_tprun(args, std::string(TPSHARD_TEST_OUT_DIR) + "/cli", prefix);
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

TEST_CASE("tprun: an unknown or missing subcommand or eval task is named with the choices, exit 2") {
  // Parse errors: the model directory is never opened, so any path will do.
  const std::string model = std::string(TPSHARD_TEST_OUT_DIR) + "/no-model-needed";
  const std::string top = "choose one of: generate, chat, logits";  // the rest depends on the build
  Run r = tprun(model + " frobnicate --prompt x");
  CHECK(r.code == 2);
  CHECK(r.err.rfind("error: tprun MODEL_DIR: unknown subcommand 'frobnicate'\nhint: " + top, 0) == 0);
  CHECK(r.err.find("(`tprun MODEL_DIR --help` describes each)\n") != std::string::npos);
  CHECK(r.err.find("comm-test") == std::string::npos);  // hidden subcommands are not offered
  CHECK(r.out.empty());
  r = tprun(model);
  CHECK(r.code == 2);
  CHECK(r.err.rfind("error: tprun MODEL_DIR: no subcommand given\nhint: " + top, 0) == 0);
  r = tprun(model + " --frob");
  CHECK(r.code == 2);
  CHECK(r.err.rfind("error: tprun MODEL_DIR: no subcommand given, and --frob is not an option here\n", 0) == 0);
  // MODEL_DIR forgotten: the subcommand's name was taken as the model directory.
  r = tprun("generate --prompt x");
  CHECK(r.code == 2);
  CHECK(r.err ==
        "error: tprun MODEL_DIR: no subcommand given ('generate' was read as MODEL_DIR)\n"
        "hint: give MODEL_DIR first, then the subcommand: `tprun MODEL_DIR generate ...`\n");
  // A subcommand's help shows the whole command line, MODEL_DIR included (CLI11 alone leaves it out).
  r = tprun(model + " generate --help");
  CHECK(r.code == 0);
  CHECK(r.out.find("\nUsage: tprun MODEL_DIR [OPTIONS] generate [OPTIONS]\n") != std::string::npos);
  r = tprun(model + " eval triviaqa --help");
  CHECK(r.out.find("\nUsage: tprun MODEL_DIR [OPTIONS] eval triviaqa [OPTIONS]\n") != std::string::npos);
  // Other parse errors keep CLI11's own message.
  r = tprun(model + " generate extra");
  CHECK(r.code == 2);
  CHECK(r.err.find("The following argument was not expected: extra") != std::string::npos);
  if (tprun("--help").out.find("\n  eval ") == std::string::npos) return;  // built without the eval library
  r = tprun(model + " eval nosuchtask --data x");
  CHECK(r.code == 2);
  CHECK(r.err == "error: tprun MODEL_DIR eval: unknown subcommand 'nosuchtask'\n"
                 "hint: choose one of: triviaqa (`tprun MODEL_DIR eval --help` describes each)\n");
  r = tprun(model + " eval");
  CHECK(r.code == 2);
  CHECK(r.err.rfind("error: tprun MODEL_DIR eval: no subcommand given\nhint: choose one of: triviaqa", 0) == 0);
  r = tprun(model + " eval triviaqa");  // a missing required option is not a missing subcommand
  CHECK(r.code == 2);
  CHECK(r.err.find("--data is required") != std::string::npos);
}

TEST_CASE("tprun refuses odd numeric options with the valid range, before loading the model") {
  const std::string dir = stories_dir();
  const unsigned hw = std::thread::hardware_concurrency();
  const std::string threads_range =
      hw ? "1.." + std::to_string(4 * hw) + " (4 x the " + std::to_string(hw) + " hardware threads of this machine)"
         : "1..1024 (this machine's hardware thread count is unknown)";
  const std::string too_many = std::to_string(hw ? 4 * hw + 1 : 1025);
  // Usage errors (CLI11 validators): exit 2, the option, the range and the value; nothing loads.
  const std::string seed_range = "--seed: must be an integer in 0..18446744073709551615, got ";
  const std::vector<std::pair<std::string, std::string>> usage = {
      {"--threads " + too_many + " generate --prompt x",
       "--threads: must be an integer in " + threads_range + ", got " + too_many},
      {"--threads 0 generate --prompt x", "--threads: must be an integer in " + threads_range + ", got 0"},
      {"generate --prompt x --seed -1", seed_range + "-1"},
      {"generate --prompt x --seed 18446744073709551616", seed_range + "18446744073709551616"},
      {"chat --prompt x --seed 1.5", seed_range + "1.5"},
      {"generate --prompt x --top-p 0", "--top-p: must be in (0, 1], got 0"},
      {"generate --prompt x --min-p 1.5", "--min-p: must be in [0, 1], got 1.5"},
      {"generate --prompt x --temperature inf", "--temperature: must be a finite number, got inf"},
      // integer options: a fraction or a number too large for the option's type (CLI11 alone: "Could not convert")
      {"generate --prompt x --max-new-tokens 1.5", "--max-new-tokens: must be an integer, got 1.5"},
      {"generate --prompt x --max-new-tokens 99999999999999999999",
       "--max-new-tokens: must be at most 2147483647, got 99999999999999999999"},
      {"generate --prompt x --max-new-tokens 3000000000", "--max-new-tokens: must be at most 2147483647, got 3000000000"},
      {"generate --prompt x --top-k 1e3", "--top-k: must be an integer, got 1e3"},
  };
  for (const auto& [args, message] : usage) {
    CAPTURE(args);
    const Run r = tprun(dir + " --device cpu " + args);
    CHECK(r.code == 2);
    CHECK(r.err.rfind("error: " + message + "\n", 0) == 0);
    CHECK(r.out.empty());
  }
  if (tprun("--help").out.find("\n  eval ") != std::string::npos) {
    const Run r = tprun(dir + " eval triviaqa --data x --seed -3");
    CHECK(r.code == 2);
    CHECK(r.err.rfind("error: --seed: must be an integer in 0..18446744073709551615, got -3\n", 0) == 0);
  }
  // --min-new-tokens above --max-new-tokens (default 128): conflicting options, error/hint, exit 2 (usage),
  // before the model loads.
  Run r = tprun(dir + " --device cpu generate --prompt x --min-new-tokens 10 --max-new-tokens 5");
  CHECK(r.code == 2);
  CHECK(r.err == "error: generate: --min-new-tokens 10 is greater than --max-new-tokens 5\n"
                 "hint: pass --min-new-tokens 0..5, or a larger --max-new-tokens\n");
  r = tprun(dir + " --device cpu chat --prompt x --min-new-tokens 129");
  CHECK(r.code == 2);
  CHECK(r.err.rfind("error: chat: --min-new-tokens 129 is greater than --max-new-tokens 128\n", 0) == 0);
  // The ends of the ranges are accepted: the largest seed, --threads 1, min == max.
  r = tprun(dir + " --device cpu --threads 1 generate --prompt x --seed 18446744073709551615 --temperature 1 "
                  "--min-new-tokens 3 --max-new-tokens 3 --ignore-eos");
  CHECK(r.code == 0);
  CHECK(r.err.find("1 thread per rank") != std::string::npos);
  CHECK(r.err.find("decode 2 tok") != std::string::npos);  // 3 tokens: 1 from prefill, 2 from decode
}

namespace {

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

/// A fresh empty directory under the test output directory.
std::string fresh_dir(const std::string& name) {
  const std::string d = std::string(TPSHARD_TEST_OUT_DIR) + "/" + name;
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d;
}

/// Command prefix that runs tprun as an unprivileged user, so permission checks mean something when the
/// tests run as root (root may read and write anything). Empty when not root.
std::string unprivileged() {
  if (::geteuid() != 0) return "";
  if (std::system("command -v setpriv >/dev/null 2>&1") == 0) return "setpriv --reuid=65534 --regid=65534 --clear-groups ";
  REQUIRE_MESSAGE(std::system("command -v runuser >/dev/null 2>&1") == 0,
                  "running as root without setpriv or runuser: cannot test permission errors");
  return "runuser -u nobody -- ";
}

/// The error of a run that must fail before loading the model: exit 1, error/hint lines naming `path`
/// and containing `problem`, no "backend" line (it is printed when the model starts loading), no stdout.
void check_fails_before_loading(const Run& r, const std::string& path, const std::string& problem) {
  CHECK(r.code == 1);
  CHECK(r.err.rfind("error: ", 0) == 0);
  CHECK(r.err.find(path) != std::string::npos);
  CHECK(r.err.find(problem) != std::string::npos);
  CHECK(r.err.find("\nhint: ") != std::string::npos);
  CHECK(r.err.find("backend") == std::string::npos);
  CHECK(r.out.empty());
  INFO("stderr: " << r.err);
}

}  // namespace

TEST_CASE("tprun generate, several prompts: stdout holds each output in prompt order, labels on stderr") {
  const std::string dir = stories_dir();
  const std::vector<std::string> prompts = {"''", "'Once upon a time'", "'Tom'"};
  const std::string opts = " --max-new-tokens 30 --stop Lily";
  // Each prompt alone (streamed, then one newline): what the batch must print, in this order.
  std::string expected;
  for (const std::string& p : prompts) {
    const Run r = tprun(dir + " --tp 2 --device cpu generate --prompt " + p + opts);
    REQUIRE(r.code == 0);
    REQUIRE(r.out.size() > 1);
    expected += r.out;
  }
  // --max-batch 2 < 3 prompts: the third waits for a free slot (continuous batching), still printed third.
  for (const char* batch : {"2", "8"}) {
    CAPTURE(batch);
    const Run r = tprun(dir + " --tp 2 --device cpu --max-batch " + batch + " generate --prompt " + prompts[0] +
                        " --prompt " + prompts[1] + " --prompt " + prompts[2] + opts);
    REQUIRE(r.code == 0);
    CHECK(r.out == expected);  // only generated text, one newline after each output
    // Greedy results of stories260K with the stop string "Lily" (the same at every tp and batch size).
    const std::vector<std::string> labels = {"--- [0] ---\n", "--- [0] stop, 14 tokens ---\n", "--- [1] ---\n",
                                             "--- [1] stop, 10 tokens ---\n", "--- [2] ---\n",
                                             "--- [2] stop, 2 tokens ---\n", "tprun: prefill "};
    size_t at = 0;
    for (const std::string& label : labels) {
      const size_t found = r.err.find(label, at);
      CHECK_MESSAGE(found != std::string::npos, "missing or out of order on stderr: " << label);
      if (found != std::string::npos) at = found + label.size();
    }
  }
}

TEST_CASE("tprun generate, several prompts: an output is printed when it is done, not when all are") {
  const std::string dir = stories_dir();
  // Prompt 0 stops at "box" after about 25 tokens; prompt 1 (no "box" in its text) runs 480 tokens in
  // the same batch. Read stdout and stderr merged, as a terminal shows them, noting when each part arrives.
  const std::string cmd = std::string(TPSHARD_BIN_DIR) + "/tprun " + dir +
                          " --tp 1 --device cpu --threads 1 --max-batch 2 generate --prompt Tom --prompt 'The sun' "
                          "--stop box --max-new-tokens 480 --ignore-eos 2>&1";
  FILE* pipe = ::popen(cmd.c_str(), "r");
  REQUIRE(pipe != nullptr);
  using Clock = std::chrono::steady_clock;
  std::string merged;
  Clock::time_point first_done{}, all_done{};
  char buf[4096];
  ssize_t n = 0;
  while ((n = ::read(::fileno(pipe), buf, sizeof buf)) > 0) {  // read(), not fread(): no waiting for a full buffer
    merged.append(buf, static_cast<size_t>(n));
    if (first_done == Clock::time_point{} && merged.find("--- [0] stop") != std::string::npos) first_done = Clock::now();
    if (all_done == Clock::time_point{} && merged.find("tprun: prefill") != std::string::npos) all_done = Clock::now();
  }
  const int status = ::pclose(pipe);
  INFO("output: " << merged);
  REQUIRE((WIFEXITED(status) && WEXITSTATUS(status) == 0));
  REQUIRE(first_done != Clock::time_point{});
  REQUIRE(all_done != Clock::time_point{});
  // Prompt 0's text and closing label come before prompt 1's label; prompt 1 ran to its length.
  const size_t text0 = merged.find(" and Lily were playing in the park.");
  const size_t label1 = merged.find("--- [1] ---\n");
  REQUIRE(text0 != std::string::npos);
  REQUIRE(label1 != std::string::npos);
  CHECK(text0 < merged.find("--- [0] stop"));
  CHECK(merged.find("--- [0] stop") < label1);
  CHECK(merged.find("--- [1] length, 480 tokens ---\n") != std::string::npos);
  // The decode of prompt 1's remaining ~440 tokens (about 90% of the decode time the summary reports)
  // lies between prompt 0's closing label and the summary. Require a quarter of the decode time, which
  // leaves room for a slow reader; printing everything at the end separates them by microseconds.
  const size_t d = merged.find("| decode ");
  REQUIRE(d != std::string::npos);
  long long decode_tokens = 0;
  double decode_s = 0;
  REQUIRE(std::sscanf(merged.c_str() + d, "| decode %lld tok %lf s", &decode_tokens, &decode_s) == 2);
  CHECK(decode_tokens > 450);
  const double gap_s = std::chrono::duration<double>(all_done - first_done).count();
  CAPTURE(decode_s);
  CHECK(gap_s >= 0.25 * decode_s);
}

TEST_CASE("tprun generate --input/--output: file problems are reported before the model loads") {
  const std::string dir = stories_dir();
  const std::string tmp = fresh_dir("cli-files");
  const std::string input = tmp + "/prompts.jsonl";
  std::ofstream(input) << "{\"id\": \"a\", \"prompt\": \"Once\"}\n";
  const std::string out = tmp + "/out.jsonl";
  const std::string gen = dir + " --tp 2 --device cpu generate --max-new-tokens 4 ";

  SUBCASE("missing input") {
    const Run r = tprun(gen + "--input " + tmp + "/nope.jsonl --output " + out);
    check_fails_before_loading(r, tmp + "/nope.jsonl", "no such file");
  }
  SUBCASE("input is a directory") {
    const Run r = tprun(gen + "--input " + tmp + " --output " + out);
    check_fails_before_loading(r, tmp, "is a directory");
  }
  SUBCASE("output directory does not exist") {
    const Run r = tprun(gen + "--input " + input + " --output " + tmp + "/no/such/dir/out.jsonl");
    check_fails_before_loading(r, tmp + "/no/such/dir", "does not exist");
    CHECK(r.err.find("mkdir -p " + tmp + "/no/such/dir") != std::string::npos);
    CHECK_FALSE(std::filesystem::exists(tmp + "/no"));
  }
  SUBCASE("output is a directory") {
    const Run r = tprun(gen + "--input " + input + " --output " + tmp);
    check_fails_before_loading(r, tmp, "is a directory");
  }
  SUBCASE("output directory not writable, input not readable") {
    const std::string ro = tmp + "/readonly";
    std::filesystem::create_directories(ro);
    REQUIRE(::chmod(tmp.c_str(), 0755) == 0);
    REQUIRE(::chmod(ro.c_str(), 0555) == 0);
    REQUIRE(::chmod(input.c_str(), 0644) == 0);
    Run r = tprun(gen + "--input " + input + " --output " + ro + "/out.jsonl", unprivileged());
    check_fails_before_loading(r, ro, "is not writable");
    CHECK_FALSE(std::filesystem::exists(ro + "/out.jsonl"));

    REQUIRE(::chmod(input.c_str(), 0) == 0);
    r = tprun(gen + "--input " + input + " --output " + out, unprivileged());
    check_fails_before_loading(r, input, "cannot be read");
    CHECK_FALSE(std::filesystem::exists(out));
    REQUIRE(::chmod(input.c_str(), 0644) == 0);
  }
  // Nothing was left behind by any case (prompts.jsonl and the readonly directory are the test's own).
  for (const auto& e : std::filesystem::recursive_directory_iterator(tmp))
    CHECK_MESSAGE((e.path() == input || e.path() == tmp + "/readonly"), "left behind: " << e.path());
}

TEST_CASE("tprun eval triviaqa: data and output problems are reported before the model loads") {
  const std::string dir = stories_dir();
  const std::string tmp = fresh_dir("cli-eval-files");
  const std::string data = std::string(TPSHARD_FIXTURES_DIR) + "/triviaqa/validation_sample.hf_layout.jsonl";
  const std::string eval = dir + " --tp 2 --device cpu eval triviaqa --shots 1 --limit 2 ";

  SUBCASE("missing data file") {
    const Run r = tprun(eval + "--data " + tmp + "/missing.jsonl --output " + tmp + "/p.jsonl");
    check_fails_before_loading(r, tmp + "/missing.jsonl", "no such file");
  }
  SUBCASE("missing --shots-from file") {
    const Run r = tprun(eval + "--data " + data + " --shots-from " + tmp + "/shots.json --output " + tmp + "/p.jsonl");
    check_fails_before_loading(r, tmp + "/shots.json", "no such file");
  }
  SUBCASE("output directory does not exist") {
    const Run r = tprun(eval + "--data " + data + " --output " + tmp + "/nodir/p.jsonl");
    check_fails_before_loading(r, tmp + "/nodir", "does not exist");
    CHECK_FALSE(std::filesystem::exists(tmp + "/nodir"));
  }
  SUBCASE("summary directory does not exist") {
    const Run r = tprun(eval + "--data " + data + " --output " + tmp + "/p.jsonl --summary " + tmp + "/nodir/s.json");
    check_fails_before_loading(r, tmp + "/nodir", "does not exist");
  }
  SUBCASE("default output in a current directory that is not writable") {
    const std::string ro = tmp + "/readonly";
    std::filesystem::create_directories(ro);
    REQUIRE(::chmod(tmp.c_str(), 0755) == 0);
    REQUIRE(::chmod(ro.c_str(), 0555) == 0);
    const Run r = tprun(eval + "--data " + data, "cd " + ro + " && " + unprivileged());
    check_fails_before_loading(r, "validation_sample.hf_layout.predictions.jsonl", "is not writable");
    CHECK(r.err.find(ro) != std::string::npos);  // names the directory
    CHECK(r.err.find("--output") != std::string::npos);  // and how to write elsewhere
  }
  // Nothing was left behind by any case (the only entry a case makes itself is the readonly directory).
  for (const auto& e : std::filesystem::recursive_directory_iterator(tmp))
    CHECK_MESSAGE(e.path() == tmp + "/readonly", "left behind: " << e.path());
}

TEST_CASE("tprun eval triviaqa without --output: names the default predictions file at start, writes it there") {
  const std::string dir = stories_dir();
  const std::string cwd = fresh_dir("cli-eval-default");
  const std::string data = std::string(TPSHARD_FIXTURES_DIR) + "/triviaqa/validation_sample.hf_layout.jsonl";
  const std::string preds = cwd + "/validation_sample.hf_layout.predictions.jsonl";
  const std::string args = dir + " --tp 2 --device cpu eval triviaqa --data " + data + " --shots 1 --limit 3";
  Run r = tprun(args, "cd " + cwd + " && ");
  REQUIRE(r.code == 0);
  INFO("stderr: " << r.err);
  const std::string notice = "tprun: eval triviaqa: predictions -> " + preds +
                             " (default: DATA_STEM.predictions.jsonl in the current directory; --output to choose), "
                             "summary -> " + preds + ".summary.json\n";
  CHECK(r.err.rfind(notice, 0) == 0);  // the first line, before the model loads
  CHECK(r.err.find("backend cpu") > r.err.find(notice));
  CHECK(r.err.find("exists") == std::string::npos);
  // The file is there, with the 3 scored questions, and the summary names it.
  std::ifstream f(preds);
  REQUIRE(f.good());
  int lines = 0;
  int64_t prompt_tokens = 0;
  for (std::string line; std::getline(f, line);) {
    if (line.empty()) continue;
    ++lines;
    prompt_tokens += nlohmann::json::parse(line)["prompt_tokens"].get<int64_t>();
  }
  CHECK(lines == 3);
  CHECK(r.out.find("predictions validation_sample.hf_layout.predictions.jsonl") != std::string::npos);
  const auto summary = nlohmann::json::parse(slurp(preds + ".summary.json"));
  CHECK(summary["n"].get<int>() == 3);
  // prefill and decode apart: each prompt token is fed or taken from a shared prefix (fed once more
  // itself), and each request's first output token comes from prefill
  CHECK(summary["prefill_tokens"].get<int64_t>() + summary["shared_prefix_tokens"].get<int64_t>() >= prompt_tokens);
  CHECK(summary["prefill_tokens"].get<int64_t>() <= prompt_tokens + summary["shared_prefix_tokens"].get<int64_t>());
  CHECK(summary["decode_tokens"].get<int64_t>() == summary["output_tokens"].get<int64_t>() - 3);
  CHECK(summary["prefill_s"].get<double>() > 0);
  CHECK(r.out.find("triviaqa: prefill ") != std::string::npos);

  // A rerun of the finished job scores that file without loading the model.
  r = tprun(args, "cd " + cwd + " && ");
  REQUIRE(r.code == 0);
  CHECK(r.err.find("validation_sample.hf_layout.predictions.jsonl already holds the predictions of all 3 questions") !=
        std::string::npos);
  CHECK(r.err.find("backend cpu") == std::string::npos);
  CHECK(r.out.find("0 generated now, 3 resumed") != std::string::npos);

  // A longer job over the same file reuses its 3 predictions, says so before loading, generates the 4th.
  const std::string args4 = dir + " --tp 2 --device cpu eval triviaqa --data " + data + " --shots 1 --limit 4";
  r = tprun(args4, "cd " + cwd + " && ");
  REQUIRE(r.code == 0);
  CHECK(r.err.rfind(notice, 0) == 0);
  CHECK(r.err.find("validation_sample.hf_layout.predictions.jsonl exists: questions already in it are scored from it") <
        r.err.find("backend cpu"));
  CHECK(r.out.find("1 generated now, 3 resumed") != std::string::npos);

  // With --output the notice names that file, without the default remark.
  r = tprun(args + " --output " + cwd + "/mine.jsonl", "cd " + cwd + " && ");
  REQUIRE(r.code == 0);
  CHECK(r.err.rfind("tprun: eval triviaqa: predictions -> " + cwd + "/mine.jsonl, summary -> " + cwd +
                        "/mine.jsonl.summary.json\n",
                    0) == 0);
  CHECK(std::filesystem::exists(cwd + "/mine.jsonl"));
}

TEST_CASE("tprun --dp 2 eval triviaqa: the summary's prefill / decode counts cover both replicas") {
  const std::string dir = stories_dir();
  const std::string cwd = fresh_dir("cli-eval-dp2");
  const std::string data = std::string(TPSHARD_FIXTURES_DIR) + "/triviaqa/validation_sample.hf_layout.jsonl";
  const std::string preds = cwd + "/p.jsonl";
  Run r = tprun(dir + " --tp 1 --dp 2 --device cpu eval triviaqa --data " + data +
                " --shots 1 --limit 6 --batch-size 2 --output " + preds);
  REQUIRE_MESSAGE(r.code == 0, r.err);
  const auto summary = nlohmann::json::parse(slurp(preds + ".summary.json"));
  CHECK(summary["n"].get<int>() == 6);
  // every request's first token comes from prefill, the rest from decode steps: over all 6 questions
  CHECK(summary["decode_tokens"].get<int64_t>() == summary["output_tokens"].get<int64_t>() - 6);
  int64_t prompt_tokens = 0;
  std::ifstream f(preds);
  for (std::string line; std::getline(f, line);)
    if (!line.empty()) prompt_tokens += nlohmann::json::parse(line)["prompt_tokens"].get<int64_t>();
  CHECK(summary["prefill_tokens"].get<int64_t>() + summary["shared_prefix_tokens"].get<int64_t>() >= prompt_tokens);
}

TEST_CASE("tprun bench-load without a GPU says it needs a CUDA device") {
  const std::string dir = stories_dir();
  std::vector<std::string> runs = {dir + " --device cpu bench-load", dir + " --tp 2 --device cpu bench-load --json"};
  // Where a GPU is visible to a CUDA build, plain bench-load really runs; everywhere else (CI) it must
  // explain itself, whatever the options.
  if (tpshard::resolve_device(tpshard::Device::Auto) != tpshard::Device::Cuda) {
    runs.push_back(dir + " bench-load");
    runs.push_back(dir + " --tp 2 bench-load --repeat 2 --no-runner");
  }
  for (const std::string& args : runs) {
    CAPTURE(args);
    const Run r = tprun(args);
    INFO("stderr: " << r.err);
    CHECK(r.code == 1);
    CHECK(r.err.rfind("error: bench-load measures loading the shards into GPU memory and needs a CUDA device: ", 0) == 0);
    CHECK(r.err.find("hint: run it on a machine with an NVIDIA GPU") != std::string::npos);
    CHECK(r.err.find("tpshard plan") != std::string::npos);
    CHECK(r.err.find("launcher") == std::string::npos);
    CHECK(r.err.find("rank 0") == std::string::npos);
    CHECK(r.out.empty());
  }
}

TEST_CASE("tprun: outputs that would overwrite an input, or are not regular files, are refused before loading") {
  const std::string dir = stories_dir();
  const std::string tmp = fresh_dir("cli-same-file");
  const std::string input = tmp + "/prompts.jsonl";
  const std::string line = "{\"id\": \"a\", \"prompt\": \"Once\"}\n";
  std::ofstream(input) << line;
  const std::string gen = dir + " --device cpu generate --max-new-tokens 4 ";
  auto text_of = [](const std::string& p) {
    std::ifstream f(p);
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
  };

  SUBCASE("generate --output is the input spelled differently") {
    const Run r = tprun(gen + "--input " + input + " --output " + tmp + "/./prompts.jsonl");
    check_fails_before_loading(r, tmp + "/./prompts.jsonl", "are the same file");
    CHECK(text_of(input) == line);
  }
  SUBCASE("generate --output is a symbolic link to the input") {
    std::filesystem::create_symlink(input, tmp + "/link.jsonl");
    const Run r = tprun(gen + "--input " + input + " --output " + tmp + "/link.jsonl");
    check_fails_before_loading(r, tmp + "/link.jsonl", "are the same file");
    CHECK(text_of(input) == line);
  }
  SUBCASE("generate --output is a device") {
    const Run r = tprun(gen + "--input " + input + " --output /dev/null");
    check_fails_before_loading(r, "/dev/null", "is not a regular file");
  }
  SUBCASE("eval --summary is the data file") {
    const std::string data = tmp + "/data.jsonl";
    std::filesystem::copy_file(std::string(TPSHARD_FIXTURES_DIR) + "/triviaqa/validation_sample.hf_layout.jsonl", data);
    const std::string before = text_of(data);
    const Run r = tprun(dir + " --device cpu eval triviaqa --shots 1 --limit 2 --data " + data + " --output " + tmp +
                        "/p.jsonl --summary " + data);
    check_fails_before_loading(r, data, "are the same file");
    CHECK(text_of(data) == before);
    CHECK_FALSE(std::filesystem::exists(tmp + "/p.jsonl"));
  }
  SUBCASE("eval --summary is the predictions file") {
    const std::string data = std::string(TPSHARD_FIXTURES_DIR) + "/triviaqa/validation_sample.hf_layout.jsonl";
    const Run r = tprun(dir + " --device cpu eval triviaqa --shots 1 --limit 2 --data " + data + " --output " + tmp +
                        "/p.jsonl --summary " + tmp + "/p.jsonl");
    check_fails_before_loading(r, tmp + "/p.jsonl", "are the same file");
  }
}

TEST_CASE("tprun generate --input: a bad sampling value on a late line fails at once, naming FILE:LINE") {
  const std::string dir = stories_dir();
  const std::string tmp = fresh_dir("cli-late-bad");
  const std::string input = tmp + "/late.jsonl";
  {
    std::ofstream f(input);
    for (int i = 0; i < 20; ++i) f << "{\"id\": \"" << i << "\", \"prompt\": \"Once\"}\n";
    f << "{\"id\": \"zz\", \"prompt\": \"y\", \"top_p\": 3}\n";
  }
  const Run r = tprun(dir + " --device cpu generate --max-new-tokens 4 --batch-size 2 --input " + input + " --output " +
                      tmp + "/out.jsonl");
  CHECK(r.code == 1);
  CHECK_MESSAGE(r.err.find(input + ":21: top_p 3") != std::string::npos, r.err);
  CHECK_FALSE(std::filesystem::exists(tmp + "/out.jsonl"));  // nothing generated before the check
  // with --on-bad-record skip the line is skipped with a warning and the rest runs
  const Run s = tprun(dir + " --device cpu generate --max-new-tokens 4 --batch-size 2 --on-bad-record skip --input " +
                      input + " --output " + tmp + "/out.jsonl");
  CHECK_MESSAGE(s.code == 0, s.err);
  CHECK(s.err.find(input + ":21: top_p 3") != std::string::npos);
  std::ifstream out(tmp + "/out.jsonl");
  int lines = 0;
  for (std::string l; std::getline(out, l);) ++lines;
  CHECK(lines == 20);
}

TEST_CASE("tprun / tpshard: a failed write to stdout is an error, not a silent success") {
  const std::string dir = stories_dir();
  const std::string bin = TPSHARD_BIN_DIR;
  CHECK(std::system((bin + "/tprun " + dir + " --device cpu tokenize --text 'Once upon a time' >/dev/full 2>/dev/null").c_str()) != 0);
  CHECK(std::system((bin + "/tprun " + dir + " --device cpu tokenize --text 'Once upon a time' >/dev/null 2>/dev/null").c_str()) == 0);
  CHECK(std::system((bin + "/tpshard inspect " + dir + " >/dev/full 2>/dev/null").c_str()) != 0);
  CHECK(std::system((bin + "/tpshard verify " + dir + " >/dev/full 2>/dev/null").c_str()) != 0);
  CHECK(std::system((bin + "/tpshard verify " + dir + " >/dev/null 2>/dev/null").c_str()) == 0);
  // generate: the error, and no closing stats line that would look like success
  const std::string err = std::string(TPSHARD_TEST_OUT_DIR) + "/cli-dev-full.err";
  CHECK(std::system((bin + "/tprun " + dir +
                     " --device cpu generate --prompt Once --max-new-tokens 4 >/dev/full 2>" + err)
                        .c_str()) != 0);
  std::ifstream f(err);
  const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  CHECK(text.find("error: tprun: writing to standard output failed (No space left on device)") !=
        std::string::npos);
  CHECK(text.find("tprun: prefill") == std::string::npos);

  // a reader that is gone (`| head` after its lines; here `| true`, gone before the first token): exit 1 with
  // the error, not death by SIGPIPE (141) in silence
  const std::string pipe_err = std::string(TPSHARD_TEST_OUT_DIR) + "/cli-closed-pipe.err";
  const std::string status = std::string(TPSHARD_TEST_OUT_DIR) + "/cli-closed-pipe.status";
  const std::string cmd = "bash -c '" + bin + "/tprun " + dir + " --device cpu generate --prompt Once --max-new-tokens 400 2>" +
                          pipe_err + " | true; echo ${PIPESTATUS[0]} >" + status + "'";
  REQUIRE(std::system(cmd.c_str()) == 0);
  std::ifstream st(status);
  int code = -1;
  st >> code;
  CHECK(code == 1);
  std::ifstream pe(pipe_err);
  const std::string ptext((std::istreambuf_iterator<char>(pe)), std::istreambuf_iterator<char>());
  CHECK_MESSAGE(ptext.find("writing to standard output failed (Broken pipe)") != std::string::npos, ptext);
}

TEST_CASE("tpshard convert: the model directory gets the umask's mode, not mkdtemp's 0700") {
  struct stat st {};
  REQUIRE(::stat(stories_dir().c_str(), &st) == 0);
  const mode_t mask = ::umask(0);
  ::umask(mask);
  CHECK((st.st_mode & 0777) == (0777 & ~mask));
}

TEST_CASE("tprun generate --input: a key that is not a request field is reported once, by name") {
  const std::string dir = stories_dir();
  const std::string tmp = fresh_dir("cli-unknown-key");
  const std::string input = tmp + "/p.jsonl";
  std::ofstream(input) << "{\"id\": \"a\", \"prompt\": \"x\", \"max_new_token\": 2}\n"
                       << "{\"id\": \"b\", \"prompt\": \"y\", \"max_new_token\": 3, \"max_new_tokens\": 2}\n";
  const Run r = tprun(dir + " --device cpu generate --max-new-tokens 3 --input " + input + " --output " + tmp + "/o.jsonl");
  CHECK_MESSAGE(r.code == 0, r.err);
  CHECK(r.err.find(input + ":1: key \"max_new_token\" is not a request field") != std::string::npos);
  CHECK(r.err.find(input + ":2: key") == std::string::npos);  // once per key name
  CHECK(r.err.find("\"max_new_tokens\"") == std::string::npos);  // known keys are not reported
}
