// test_cli_preflight.cpp: request errors reported by tprun's preflight, before any weight loads (no
// "tprun: backend" line before the error): bad JSONL lines of generate --input (top_p 3, duplicate id,
// wrong type, integers too wide or fractional, prompt + max_new_tokens over --max-seq-len), generate
// --max-new-tokens beyond the model's context (no "raise --max-seq-len" hint there), eval triviaqa with
// --shots above the record count and with bad records; --on-bad-record skip reports each bad line once, before loading, and runs the rest.
// Also check_request's two hints (below / at the model's limit) on host values.
#include <doctest/doctest.h>

#include <sys/wait.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "format/error.h"
#include "runtime/generate.h"
#include "tests/runtime/cli_run.h"

namespace {

using PfRun = tpshard::test::CliRun;

/// Runs `tprun args` with the working directory `cwd` (stdout and stderr captured there).
PfRun pf_tprun(const std::string& args, const std::string& cwd) {
  return tpshard::test::run_tprun(args, cwd, "cd " + cwd + " && ");
}

/// stories260K (max_position_embeddings 512) converted for tp 1 and 2, its own copy.
std::string pf_model_dir() {
  std::filesystem::create_directories(TPSHARD_TEST_OUT_DIR);
  const std::string out = std::string(TPSHARD_TEST_OUT_DIR) + "/cli-preflight-stories260K";
  const std::string cmd = std::string(TPSHARD_BIN_DIR) + "/tpshard convert " + TPSHARD_FIXTURES_DIR +
                          "/stories260K -o " + out + " --tp 1,2 --force -q >/dev/null";
  REQUIRE(std::system(cmd.c_str()) == 0);
  return out;
}

std::string pf_fresh_dir(const std::string& name) {
  const std::string d = std::string(TPSHARD_TEST_OUT_DIR) + "/" + name;
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d;
}

void pf_write(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << text;
}

bool pf_has_eval(const std::string& cwd) { return pf_tprun("--help", cwd).out.find("\n  eval ") != std::string::npos; }

/// The run failed with exactly `error` + `hint` on stderr (after any lines in `before`), and nothing
/// loaded: no backend line, no stdout.
void check_preflight_error(const PfRun& r, const std::string& before, const std::string& error, const std::string& hint) {
  INFO("stderr: " << r.err);
  CHECK(r.code == 1);
  CHECK(r.err == before + "error: " + error + "\nhint: " + hint + "\n");
  CHECK(r.err.find("backend") == std::string::npos);
  CHECK(r.out.empty());
}

}  // namespace

TEST_CASE("check_request: the hint names --max-seq-len only below the model's own limit") {
  using tpshard::Error;
  tpshard::GenerationRequest r{"q", std::vector<int32_t>(6, 3), {}};
  r.params.max_new_tokens = 5;  // 6 + 5 - 1 = 10 positions
  auto message = [&](int64_t max_seq, int64_t limit) {
    try {
      tpshard::check_request(r, max_seq, "request q", limit);
    } catch (const Error& e) {
      return std::string(e.what()) + " | " + e.hint();
    }
    return std::string("no error");
  };
  CHECK(message(8, 0) == "request q: prompt of 6 tokens + max_new_tokens 5 exceeds --max-seq-len 8 | lower "
                         "max_new_tokens to 3 or less, or raise --max-seq-len if it is below the model's "
                         "max_position_embeddings");
  CHECK(message(8, 512) == message(8, 0));
  CHECK(message(8, 8) == "request q: prompt of 6 tokens + max_new_tokens 5 exceeds the model's context of 8 "
                         "positions | shorten the prompt, or lower max_new_tokens to 3 or less");
  CHECK(message(10, 10) == "no error");  // exactly fits
  r.prompt_ids.assign(9, 3);
  CHECK(message(8, 8) == "request q: prompt of 9 tokens exceeds the model's context of 8 positions | shorten the prompt");
  CHECK(message(8, 100) == "request q: prompt of 9 tokens exceeds --max-seq-len 8 | shorten the prompt, or raise "
                           "--max-seq-len if it is below the model's max_position_embeddings");

  tpshard::ModelConfig c;
  CHECK(tpshard::model_position_limit(c) == 0);
  c.max_position_embeddings = 4096;
  CHECK(tpshard::model_position_limit(c) == 4096);
  c.sliding_window = 1000;  // attention within the window: no limit on the sequence
  CHECK(tpshard::model_position_limit(c) == 4096);
  c.max_position_embeddings = 0;
  CHECK(tpshard::model_position_limit(c) == 0);
}

TEST_CASE("tprun generate --input: bad lines fail before the model loads, with FILE:LINE") {
  const std::string m = pf_model_dir();
  const std::string tmp = pf_fresh_dir("cli-preflight-gen");
  const std::string gen = m + " --tp 2 --device cpu generate --input in.jsonl --output out.jsonl ";
  const std::string good = "{\"id\": 1, \"prompt\": \"Once\"}\n";
  const std::string skip_hint = "fix the line, or pass --on-bad-record skip to leave such lines out";

  SUBCASE("top_p 3") {
    pf_write(tmp + "/in.jsonl", good + "{\"id\": 2, \"prompt\": \"hi\", \"top_p\": 3}\n");
    check_preflight_error(pf_tprun(gen, tmp), "", "in.jsonl:2: top_p 3.000000 is outside (0, 1]",
                          "use top_p in (0, 1]; 1 turns it off");
  }
  SUBCASE("duplicate id") {
    pf_write(tmp + "/in.jsonl", good + "{\"id\": 2, \"prompt\": \"a\"}\n{\"id\": 1, \"prompt\": \"b\"}\n");
    check_preflight_error(pf_tprun(gen, tmp), "", "in.jsonl:3: duplicate id 1",
                          "ids must be unique for resuming; fix the input");
  }
  SUBCASE("wrong type") {
    pf_write(tmp + "/in.jsonl", good + "{\"id\": 2, \"prompt\": \"a\", \"max_new_tokens\": \"many\"}\n");
    check_preflight_error(pf_tprun(gen, tmp), "",
                          "in.jsonl:2: \"max_new_tokens\" is \"many\", expected an integer in 0..2147483647", skip_hint);
  }
  SUBCASE("an integer too wide for its field, or a fraction: refused, not truncated") {
    pf_write(tmp + "/in.jsonl", good + "{\"id\": \"a\", \"prompt\": \"x\", \"max_new_tokens\": 4294967297}\n");
    check_preflight_error(pf_tprun(gen, tmp), "",
                          "in.jsonl:2: \"max_new_tokens\" is 4294967297, expected an integer in 0..2147483647", skip_hint);
    pf_write(tmp + "/in.jsonl", good + "{\"id\": \"a\", \"prompt\": \"x\", \"seed\": 1e30}\n");
    check_preflight_error(pf_tprun(gen, tmp), "",
                          "in.jsonl:2: \"seed\" is 1e+30 (a number beyond the 64-bit integer range), expected an integer in 0..18446744073709551615", skip_hint);
    pf_write(tmp + "/in.jsonl", good + "{\"id\": \"a\", \"prompt\": \"x\", \"max_new_tokens\": 2.5}\n");
    check_preflight_error(pf_tprun(gen, tmp), "",
                          "in.jsonl:2: \"max_new_tokens\" is 2.5 (a number with a fraction), expected an integer in 0..2147483647", skip_hint);
  }
  SUBCASE("prompt + max_new_tokens over --max-seq-len (below the model's 512)") {
    pf_write(tmp + "/in.jsonl", good + "{\"id\": 2, \"prompt_ids\": [1, 2, 3, 4, 5, 6], \"max_new_tokens\": 5}\n");
    const std::string args = m + " --tp 2 --device cpu --max-seq-len 8 generate --input in.jsonl --output out.jsonl "
                                 "--max-new-tokens 2";
    check_preflight_error(pf_tprun(args, tmp), "",
                          "in.jsonl:2: prompt of 6 tokens + max_new_tokens 5 exceeds --max-seq-len 8",
                          "lower max_new_tokens to 3 or less, or raise --max-seq-len if it is below the model's "
                          "max_position_embeddings");
  }
  CHECK_FALSE(std::filesystem::exists(tmp + "/out.jsonl"));
}

TEST_CASE("tprun generate --input --on-bad-record skip: bad lines reported once, before loading; the rest runs") {
  const std::string m = pf_model_dir();
  const std::string tmp = pf_fresh_dir("cli-preflight-skip");
  pf_write(tmp + "/in.jsonl",
           "{\"id\": 1, \"prompt\": \"Once\"}\n{\"id\": 2, \"prompt\": \"hi\", \"top_p\": 3}\n"
           "{\"id\": 1, \"prompt\": \"dup\"}\n{\"id\": 4, \"prompt\": \"x\", \"max_new_tokens\": \"many\"}\n"
           "{\"id\": 5, \"prompt\": \"Lily\"}\n");
  const PfRun r = pf_tprun(m + " --tp 2 --device cpu generate --input in.jsonl --output out.jsonl --on-bad-record skip "
                               "--max-new-tokens 4",
                           tmp);
  INFO("stderr: " << r.err);
  REQUIRE(r.code == 0);
  const std::string warnings = "warning: in.jsonl:2: top_p 3.000000 is outside (0, 1] (skipped)\n"
                               "warning: in.jsonl:3: duplicate id 1 (skipped)\n"
                               "warning: in.jsonl:4: \"max_new_tokens\" is \"many\", expected an integer in "
                               "0..2147483647 (skipped)\n";
  CHECK(r.err.rfind(warnings + "tprun: backend cpu", 0) == 0);  // first, before the load, and once only
  CHECK(r.err.find("(skipped)", warnings.size()) == std::string::npos);
  CHECK(r.err.find("(0 done before, 3 skipped as bad)") != std::string::npos);
  std::ifstream f(tmp + "/out.jsonl");
  int lines = 0;
  for (std::string line; std::getline(f, line);) lines += !line.empty();
  CHECK(lines == 2);
}

TEST_CASE("tprun generate --input on a finished output: nothing loads, exit 0, the file stays the same") {
  const std::string m = pf_model_dir();
  const std::string tmp = pf_fresh_dir("cli-preflight-finished");
  pf_write(tmp + "/in.jsonl", "{\"id\": 1, \"prompt\": \"Once\"}\n{\"id\": 2, \"prompt\": \"Lily\"}\n");
  const std::string cmd = m + " --tp 2 --device cpu generate --input in.jsonl --output out.jsonl --max-new-tokens 4";
  const PfRun first = pf_tprun(cmd, tmp);
  REQUIRE(first.code == 0);
  std::stringstream before;
  before << std::ifstream(tmp + "/out.jsonl").rdbuf();
  const PfRun again = pf_tprun(cmd, tmp);
  INFO("stderr: " << again.err);
  CHECK(again.code == 0);
  CHECK(again.err.find("generate: out.jsonl already holds the results of all 2 prompts of in.jsonl: nothing to generate") !=
        std::string::npos);
  CHECK(again.err.find("backend") == std::string::npos);  // no weight loaded
  std::stringstream after;
  after << std::ifstream(tmp + "/out.jsonl").rdbuf();
  const std::string text = after.str();
  CHECK(text == before.str());
  CHECK(std::count(text.begin(), text.end(), '\n') == 2);
  // one more prompt: the job runs (and loads) again, and only for it
  pf_write(tmp + "/in.jsonl", "{\"id\": 1, \"prompt\": \"Once\"}\n{\"id\": 2, \"prompt\": \"Lily\"}\n"
                              "{\"id\": 3, \"prompt\": \"Tom\"}\n");
  const PfRun more = pf_tprun(cmd, tmp);
  CHECK(more.code == 0);
  CHECK(more.err.find("(2 done before, 0 skipped as bad)") != std::string::npos);
}

TEST_CASE("tprun generate --input with nothing to run (an empty file, or every record skipped) fails before loading") {
  const std::string m = pf_model_dir();
  const std::string tmp = pf_fresh_dir("cli-preflight-nothing");
  pf_write(tmp + "/empty.jsonl", "\n  \n");
  check_preflight_error(pf_tprun(m + " --tp 2 --device cpu generate --input empty.jsonl --output out.jsonl", tmp), "",
                        "empty.jsonl: no prompt to generate for: the file has no records",
                        "give one JSON object per line, e.g. {\"prompt\": \"Once upon a time\"}");
  pf_write(tmp + "/bad.jsonl", "{\"id\": 1, \"prompt\": \"hi\", \"top_p\": 3}\n");
  check_preflight_error(
      pf_tprun(m + " --tp 2 --device cpu generate --input bad.jsonl --output out.jsonl --on-bad-record skip", tmp),
      "warning: bad.jsonl:1: top_p 3.000000 is outside (0, 1] (skipped)\n",
      "bad.jsonl: no prompt to generate for: all 1 records were skipped as bad (warnings above)",
      "fix the records, or drop --on-bad-record skip to stop at the first bad one");
  CHECK_FALSE(std::filesystem::exists(tmp + "/out.jsonl"));
}

TEST_CASE("tprun generate --input: an output another job writes, or one of another model, fails before loading") {
  const std::string m = pf_model_dir();
  const std::string tmp = pf_fresh_dir("cli-preflight-output");
  pf_write(tmp + "/in.jsonl", "{\"id\": \"a\", \"prompt\": \"Once\"}\n");
  // A result line of another model under the same id.
  pf_write(tmp + "/other.jsonl", "{\"id\": \"a\", \"text\": \"x\", \"output_ids\": [1], \"finish_reason\": \"length\", "
                                 "\"model_xxh3\": \"0123456789abcdef\"}\n");
  const PfRun other = pf_tprun(m + " --tp 2 --device cpu generate --input in.jsonl --output other.jsonl --max-new-tokens 2", tmp);
  INFO("stderr: " << other.err);
  CHECK(other.code == 1);
  CHECK(other.err.find("error: other.jsonl: was made with another model") == 0);
  CHECK(other.err.find("backend") == std::string::npos);
  // An output whose lock another process holds (flock in a shell, as a running job does).
  pf_write(tmp + "/busy.jsonl", "");
  const std::string hold = "cd " + tmp + " && (flock -x busy.jsonl sleep 5 &) && sleep 0.5 && ";
  const PfRun busy =
      tpshard::test::run_tprun(m + " --tp 2 --device cpu generate --input in.jsonl --output busy.jsonl --max-new-tokens 2", tmp, hold);
  INFO("stderr: " << busy.err);
  CHECK(busy.code == 1);
  CHECK(busy.err.find("error: busy.jsonl: another job is writing this file") == 0);
  CHECK(busy.err.find("backend") == std::string::npos);
}

TEST_CASE("tprun generate --prompt: max_new_tokens beyond the model's context fails before loading, "
          "without hinting --max-seq-len") {
  const std::string m = pf_model_dir();
  const std::string tmp = pf_fresh_dir("cli-preflight-prompt");
  // "" is BOS only: 1 prompt token, so 512 new tokens fit stories260K's 512 positions and 100000 do not.
  const std::string error = "request 0: prompt of 1 tokens + max_new_tokens 100000 exceeds the model's context of "
                            "512 positions";
  const std::string hint = "shorten the prompt, or lower max_new_tokens to 512 or less";
  check_preflight_error(pf_tprun(m + " --tp 2 --device cpu generate --prompt '' --max-new-tokens 100000", tmp), "",
                        error, hint);
  // --max-seq-len already at the model's limit: same answer.
  check_preflight_error(
      pf_tprun(m + " --tp 2 --device cpu --max-seq-len 512 generate --prompt '' --max-new-tokens 100000", tmp), "",
      error, hint);
  // Below the limit, raising --max-seq-len is the hint.
  check_preflight_error(
      pf_tprun(m + " --tp 2 --device cpu --max-seq-len 16 generate --prompt '' --max-new-tokens 100", tmp), "",
      "request 0: prompt of 1 tokens + max_new_tokens 100 exceeds --max-seq-len 16",
      "lower max_new_tokens to 16 or less, or raise --max-seq-len if it is below the model's max_position_embeddings");
}

TEST_CASE("tprun eval triviaqa: too many --shots and bad records fail before the model loads") {
  const std::string m = pf_model_dir();
  const std::string tmp = pf_fresh_dir("cli-preflight-eval");
  if (!pf_has_eval(tmp)) return;
  const std::string data = std::string(TPSHARD_FIXTURES_DIR) + "/triviaqa/validation_sample.hf_layout.jsonl";  // 32
  const std::string eval = m + " --tp 2 --device cpu eval triviaqa --output " + tmp + "/p.jsonl ";
  const std::string notice = "tprun: eval triviaqa: predictions -> " + tmp + "/p.jsonl, summary -> " + tmp +
                             "/p.jsonl.summary.json\n";

  // A refused run prints only its error: the notice naming the output files comes after every check.
  check_preflight_error(
      pf_tprun(eval + "--data " + data + " --shots 40", tmp), "",
      data + ": holds 32 records; --shots 40 takes the first ones as shots and leaves none to score",
      "lower --shots or give the shots with --shots-from");
  check_preflight_error(pf_tprun(eval + "--data " + data + " --shots-from " + data + " --shots 40", tmp), "",
                        data + ": holds 32 records, fewer than --shots 40",
                        "lower --shots or give a larger --shots-from file");

  // Records 4 and 5 are bad: stop names the first; skip warns about both once, before loading, and runs.
  std::ifstream in(data);
  std::string bad;
  std::string line;
  for (int i = 0; i < 6 && std::getline(in, line); ++i) {
    if (i == 3) bad += "{\"question\": 5}\nnope\n";
    bad += line + "\n";
  }
  pf_write(tmp + "/bad.jsonl", bad);
  check_preflight_error(pf_tprun(eval + "--data bad.jsonl --shots 1", tmp), "",
                        "bad.jsonl:4: field 'question' is number, expected a string",
                        "fix or remove the record (--on-bad-record skip leaves it out)");
  const PfRun r = pf_tprun(eval + "--data bad.jsonl --shots 1 --max-new-tokens 2 --on-bad-record skip", tmp);
  INFO("stderr: " << r.err);
  REQUIRE(r.code == 0);
  CHECK(r.err.rfind("warning: bad.jsonl:4: field 'question' is number, expected a string (skipped)\n"
                    "warning: bad.jsonl:5:2: not valid JSON: syntax error while parsing value - invalid "
                    "literal; last read: 'no' (skipped)\n" +
                        notice + "tprun: backend cpu",
                    0) == 0);
  CHECK(r.err.find("(skipped)", r.err.find("backend cpu")) == std::string::npos);
  CHECK(r.out.find("triviaqa: n=5 ") != std::string::npos);

  // A few-shot prompt longer than --max-seq-len: named with the question's id, as the run names it.
  const PfRun longp = pf_tprun(m + " --tp 2 --device cpu --max-seq-len 64 eval triviaqa --output " + tmp +
                                   "/p5.jsonl --data " + data + " --shots 5",
                               tmp);
  INFO("stderr: " << longp.err);
  CHECK(longp.code == 1);
  CHECK(longp.err.find("error: request ") != std::string::npos);
  // the user does not write these prompts: the hint is to lower --shots
  CHECK(longp.err.find(" tokens exceeds --max-seq-len 64 (the 5-shot prompt of this question)\nhint: lower --shots "
                       "(each shot adds a question and its answer to every prompt), or raise --max-seq-len") !=
        std::string::npos);
  CHECK(longp.err.find("backend") == std::string::npos);
}

TEST_CASE("tprun eval triviaqa on a finished predictions file: nothing loads, the same scores and summary, exit 0") {
  const std::string m = pf_model_dir();
  const std::string tmp = pf_fresh_dir("cli-preflight-eval-finished");
  if (!pf_has_eval(tmp)) return;
  const std::string data = std::string(TPSHARD_FIXTURES_DIR) + "/triviaqa/validation_sample.hf_layout.jsonl";
  const std::string cmd = m + " --tp 2 --device cpu eval triviaqa --output p.jsonl --data " + data +
                          " --shots 1 --limit 6 --max-new-tokens 3";
  const PfRun first = pf_tprun(cmd, tmp);
  INFO("stderr: " << first.err);
  REQUIRE(first.code == 0);
  const std::string scores_line = first.out.substr(0, first.out.find('\n'));  // "triviaqa: n=6  EM=..  F1=.."
  REQUIRE(scores_line.find("triviaqa: n=6 ") == 0);
  std::stringstream before;
  before << std::ifstream(tmp + "/p.jsonl").rdbuf();
  const auto first_summary = nlohmann::json::parse(std::ifstream(tmp + "/p.jsonl.summary.json"));

  const PfRun again = pf_tprun(cmd, tmp);
  INFO("stderr: " << again.err);
  CHECK(again.code == 0);
  CHECK(again.err.find("p.jsonl already holds the predictions of all 6 questions: scored from it (no weights loaded)") !=
        std::string::npos);
  CHECK(again.err.find("backend") == std::string::npos);  // no weight loaded
  // the same EM / F1 as the run that generated them; nothing generated now, all 6 resumed
  const std::string em_f1 = scores_line.substr(0, scores_line.find("  ("));
  CHECK(again.out.rfind(em_f1 + "  (1-shot, 0 generated now, 6 resumed)", 0) == 0);
  std::stringstream after;
  after << std::ifstream(tmp + "/p.jsonl").rdbuf();
  CHECK(after.str() == before.str());
  const auto summary = nlohmann::json::parse(std::ifstream(tmp + "/p.jsonl.summary.json"));
  CHECK(summary["exact_match"] == first_summary["exact_match"]);
  CHECK(summary["f1"] == first_summary["f1"]);
  CHECK(summary["n"] == 6);
  CHECK(summary["already_done"] == 6);
  CHECK(summary["generated"] == 0);
  CHECK(summary["tp_size"] == 2);
}
