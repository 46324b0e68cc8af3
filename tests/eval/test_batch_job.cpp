// test_batch_job.cpp: resumable batch jobs end to end on the fake model: an eval run killed mid-way,
// with a torn last line added, then rerun, ends with the same predictions file and scores as an
// uninterrupted run; generate --input/--output lines and bad-record handling.
#include <doctest/doctest.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "eval/batch_job.h"
#include "eval/fewshot_prompt.h"
#include "eval/generate_jsonl.h"
#include "eval/resumable_jsonl.h"
#include "eval/triviaqa_eval.h"
#include "format/error.h"
#include "tests/eval/fake_model.h"

using namespace tpshard;
using namespace tpshard::eval;

namespace {
const std::string kData = TPSHARD_TEST_FIXTURES "/triviaqa/validation_sample.hf_layout.jsonl";

std::string temp_path(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() / ("tpshard_test_eval_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::string p = (dir / name).string();
  std::filesystem::remove(p);
  std::filesystem::remove(p + ".summary.json");
  return p;
}
std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}
size_t count_lines(const std::string& text) { return static_cast<size_t>(std::count(text.begin(), text.end(), '\n')); }

RankContext make_ctx(ModelRunner& runner, const Tokenizer& tok) {
  RankContext ctx;
  ctx.runner = &runner;
  ctx.tokenizer = &tok;
  return ctx;
}

/// What the fake model generates after `prompt_ids`, cut as generate() cuts it (EOS, length, and with
/// stop_at_newline the "\n" stop string).
std::string expected_generation(std::vector<int32_t> ids, int max_new_tokens, bool stop_at_newline) {
  std::string text;
  for (int i = 0; i < max_new_tokens; ++i) {
    int32_t next = test::fake_next_token(ids.back(), static_cast<int64_t>(ids.size()) - 1);
    if (next == test::ByteTokenizer::kEos || (stop_at_newline && next == '\n')) break;
    text.push_back(static_cast<char>(next));
    ids.push_back(next);
  }
  return text;
}
}  // namespace

namespace {
/// Run f, which must throw Error; returns it (what() and hint()).
template <typename F>
Error expect_error(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e;
  }
  FAIL("expected an Error");
  return Error("");
}
}  // namespace

TEST_CASE("triviaqa eval: a killed run, resumed, ends identical to an uninterrupted run") {
  test::ByteTokenizer tok;
  TriviaQaOptions o;
  o.data_path = kData;
  o.shots = 5;
  o.batch_size = 4;
  o.max_new_tokens = 12;
  o.progress_interval_s = 1e9;

  // Uninterrupted.
  test::FakeRunner runner_a(/*max_batch=*/3);
  RankContext ctx_a = make_ctx(runner_a, tok);
  o.output_path = temp_path("full.jsonl");
  TriviaQaSummary full = run_triviaqa_eval(ctx_a, o);
  const std::string full_text = slurp(o.output_path);
  CHECK(full.questions == 27);  // 32 records - 5 shots
  CHECK(full.scores.n == 27);
  CHECK(full.generated == 27);
  CHECK(count_lines(full_text) == 27);

  // Every line: the answer the fake model must give, scored against the record's aliases.
  auto data = load_triviaqa(kData);
  std::vector<TriviaQaRecord> shots(data.records.begin(), data.records.begin() + 5);
  std::istringstream lines(full_text);
  std::string line;
  size_t i = 5;
  double em_sum = 0, f1_sum = 0;
  while (std::getline(lines, line)) {
    auto j = nlohmann::json::parse(line);
    const TriviaQaRecord& rec = data.records[i++];
    CHECK(j["id"] == rec.id);  // input order
    std::string gen = expected_generation(tok.encode(build_fewshot_prompt(shots, rec.question), true), 12, true);
    CHECK(j["prediction"] == extract_answer(gen));
    CHECK(j["answers"] == rec.ground_truths);
    em_sum += j["exact_match"].get<double>();
    f1_sum += j["f1"].get<double>();
  }
  CHECK(full.scores.exact_match == doctest::Approx(em_sum / 27));
  CHECK(full.scores.f1 == doctest::Approx(f1_sum / 27));
  // The shots are one prefix for the whole job, prefilled once (not once per batch of 4): the tokens
  // computed plus the tokens read from the prefix exceed the prompts' tokens by that one prefix.
  int64_t prompt_total = 0, shortest = INT64_MAX;
  for (size_t r = 5; r < data.records.size(); ++r) {
    const auto n = static_cast<int64_t>(tok.encode(build_fewshot_prompt(shots, data.records[r].question), true).size());
    prompt_total += n;
    shortest = std::min(shortest, n);
  }
  const int64_t prefixes_prefilled = full.stats.prefill_tokens + full.stats.shared_prefix_tokens - prompt_total;
  CHECK(prefixes_prefilled > 16);
  CHECK(prefixes_prefilled < shortest);
  auto summary_json = nlohmann::json::parse(slurp(o.output_path + ".summary.json"));
  CHECK(summary_json["n"] == 27);
  CHECK(summary_json["exact_match"].get<double>() == doctest::Approx(full.scores.exact_match));

  // Killed in the middle of a batch, then a torn line appended (a write cut short).
  test::FakeRunner runner_b(3);
  runner_b.fail_after_forwards = runner_a.forwards / 2;
  RankContext ctx_b = make_ctx(runner_b, tok);
  o.output_path = temp_path("resumed.jsonl");
  CHECK_THROWS_WITH(run_triviaqa_eval(ctx_b, o), "simulated kill");
  const size_t written = count_lines(slurp(o.output_path));
  CHECK(written > 0);
  CHECK(written < 27);
  // (the lines of the requests finished before the kill: requests run continuously, not in whole batches)
  { std::ofstream(o.output_path, std::ios::app | std::ios::binary) << "{\"id\": \"lf_00"; }

  test::FakeRunner runner_c(3);
  RankContext ctx_c = make_ctx(runner_c, tok);
  TriviaQaSummary resumed = run_triviaqa_eval(ctx_c, o);
  CHECK(resumed.already_done == written);
  CHECK(resumed.generated == 27 - written);
  CHECK(slurp(o.output_path) == full_text);
  CHECK(resumed.scores.n == 27);
  CHECK(resumed.scores.exact_match == full.scores.exact_match);
  CHECK(resumed.scores.f1 == full.scores.f1);

  // A third run has nothing left to do and leaves the file as it is.
  test::FakeRunner runner_d(3);
  RankContext ctx_d = make_ctx(runner_d, tok);
  TriviaQaSummary again = run_triviaqa_eval(ctx_d, o);
  CHECK(again.generated == 0);
  CHECK(runner_d.forwards == 0);
  CHECK(slurp(o.output_path) == full_text);
  CHECK(score_predictions_file(o.output_path).n == 27);
}

TEST_CASE("triviaqa eval: --shots-from, --limit") {
  test::ByteTokenizer tok;
  test::FakeRunner runner(8);
  RankContext ctx = make_ctx(runner, tok);
  TriviaQaOptions o;
  o.data_path = kData;
  o.shots_from = TPSHARD_TEST_FIXTURES "/triviaqa/triviaqa_sample.official.json";
  o.shots = 1;
  o.limit = 6;
  o.output_path = temp_path("limit.jsonl");
  o.summary_path = temp_path("limit.summary.json");
  o.progress_interval_s = 1e9;
  TriviaQaSummary s = run_triviaqa_eval(ctx, o);
  CHECK(s.questions == 6);
  CHECK(s.scores.n == 6);
  auto first = nlohmann::json::parse(slurp(o.output_path).substr(0, slurp(o.output_path).find('\n')));
  CHECK(first["id"] == "lf_0000");  // with --shots-from nothing of --data is used as a shot
  CHECK(std::filesystem::exists(o.summary_path));
  o.shots = 2;  // the official sample holds one record
  CHECK_THROWS_AS(run_triviaqa_eval(ctx, o), Error);
  // shots taken from the data file itself would put their answers into the prompts of the same questions
  o.shots_from = kData;
  o.shots = 2;
  const Error e = expect_error([&] { run_triviaqa_eval(ctx, o); });
  CHECK(std::string(e.what()) == o.shots_from + ": its shot lf_0000 is also a question of " + kData +
                                     " to score (its answer would be in the prompt)");
}

TEST_CASE("default predictions path") {
  CHECK(default_predictions_path("/data/triviaqa/validation.hf.jsonl") == "validation.hf.predictions.jsonl");
  CHECK(default_predictions_path("validation_sample.lf.jsonl") == "validation_sample.lf.predictions.jsonl");
  CHECK(default_predictions_path("validation_sample.hf_layout.jsonl") ==
        "validation_sample.hf_layout.predictions.jsonl");
  CHECK(default_predictions_path("a/qa.txt") == "qa.txt.predictions.jsonl");
  CHECK(default_predictions_path("a/.jsonl") == "triviaqa.predictions.jsonl");
  CHECK(default_predictions_path("qa.json") == "qa.predictions.jsonl");
  CHECK(default_predictions_path("dir/") == "triviaqa.predictions.jsonl");
}

TEST_CASE("generate --input/--output: lines, default ids, per-line options, bad records") {
  test::ByteTokenizer tok;
  test::FakeRunner runner(2);
  RankContext ctx = make_ctx(runner, tok);
  const std::string in = temp_path("prompts.jsonl");
  std::ofstream(in) << "{\"id\": \"x\", \"prompt\": \"Hello\"}\n"
                       "{\"prompt\": \"Hi\", \"max_new_tokens\": 3}\n"
                       "\n"
                       "{\"prompt_ids\": [104, 105], \"stop\": \"zo\"}\n";
  const std::string out = temp_path("gen.jsonl");
  SamplingParams defaults;
  defaults.max_new_tokens = 8;
  run_generate_jsonl(ctx, in, out, defaults, 2);
  std::istringstream lines(slurp(out));
  std::vector<nlohmann::json> js;
  for (std::string l; std::getline(lines, l);) js.push_back(nlohmann::json::parse(l));
  REQUIRE(js.size() == 3);
  CHECK(js[0]["id"] == "x");
  CHECK(js[1]["id"] == 2);  // the line number
  CHECK(js[2]["id"] == 4);
  CHECK(js[0]["prompt"] == "Hello");
  CHECK(js[2]["prompt"] == "hi");
  CHECK(js[0]["text"] == expected_generation(tok.encode("Hello", true), 8, false));
  CHECK(js[1]["text"] == expected_generation(tok.encode("Hi", true), 3, false));
  CHECK(js[0]["prompt_tokens"] == 6);
  CHECK(js[2]["prompt_tokens"] == 2);
  for (const auto& j : js) {
    CHECK(j["output_ids"].is_array());
    CHECK(j["finish_reason"].is_string());
  }
  // "hi" at positions 0,1: 'i'(105)+1 = 106 % 28 = 22 -> 'w'; then 'w'(119)+2 = 121 % 28 = 9 -> 'j';
  // 'j'(106)+3 = 109 % 28 = 25 -> 'z'; 'z'(122)+4 = 126 % 28 = 14 -> 'o': "wjzo" holds the stop "zo".
  CHECK(js[2]["text"] == "wj");
  CHECK(js[2]["finish_reason"] == "stop");

  const std::string bad = temp_path("bad_prompts.jsonl");
  std::ofstream(bad) << "{\"id\": 1, \"prompt\": \"ok\"}\n{\"id\": 2}\n{\"id\": 3, \"prompt\": \"ok\", \"top_k\": \"x\"}\n"
                        "{\"id\": 1, \"prompt\": \"dup\"}\n";
  const std::string bad_out = temp_path("bad_out.jsonl");
  try {
    run_generate_jsonl(ctx, bad, bad_out, defaults, 2);
    FAIL("expected an Error");
  } catch (const Error& e) {
    CHECK(std::string(e.what()) == bad + ":2: no \"prompt\" (string), \"prompt_ids\" (list) or \"messages\" (list)");
  }
  GenerateJsonlOptions skip;
  skip.on_bad_record = BadRecordPolicy::Skip;
  run_generate_jsonl(ctx, bad, bad_out, defaults, 2, skip);
  CHECK(count_lines(slurp(bad_out)) == 1);
}


TEST_CASE("generate --input: integer fields out of range, negative or fractional are refused, not truncated") {
  test::ByteTokenizer tok;  // vocab 258: token ids 0..257
  SamplingParams defaults;
  defaults.max_new_tokens = 8;
  const std::string in = temp_path("int_fields.jsonl");
  const std::string hint = "fix the line, or pass --on-bad-record skip to leave such lines out";
  auto read = [&](const std::string& line) {
    std::ofstream(in) << "{\"id\": \"ok\", \"prompt\": \"x\"}\n" << line << "\n";
    return read_generate_jsonl(in, tok, defaults, 0, 0, BadRecordPolicy::Stop, false);
  };
  struct Case {
    std::string line, message;
  };
  const Case cases[] = {
      // too large for the int field: get<int>() would have read 4294967297 as 1
      {R"({"id": "a", "prompt": "x", "max_new_tokens": 4294967297})",
       R"("max_new_tokens" is 4294967297, expected an integer in 0..2147483647)"},
      {R"({"prompt": "x", "max_new_tokens": 2147483648})",
       R"("max_new_tokens" is 2147483648, expected an integer in 0..2147483647)"},
      {R"({"prompt": "x", "top_k": 18446744073709551615})",
       R"("top_k" is 18446744073709551615, expected an integer in 0..2147483647)"},
      {R"({"prompt": "x", "seed": 1e30})", R"("seed" is 1e+30 (a number beyond the 64-bit integer range), expected an integer in 0..18446744073709551615)"},
      {R"({"prompt": "x", "seed": 18446744073709551616})",  // parsed as a float: one past 2^64-1
       R"("seed" is 1.8446744073709552e+19 (a number beyond the 64-bit integer range), expected an integer in 0..18446744073709551615)"},
      {R"({"prompt_ids": [5, 258]})", R"("prompt_ids[1]" is 258, expected an integer in 0..257)"},
      {R"({"prompt_ids": [4294967301]})", R"("prompt_ids[0]" is 4294967301, expected an integer in 0..257)"},
      // negative where not allowed
      {R"({"prompt": "x", "max_new_tokens": -1})", R"("max_new_tokens" is -1, expected an integer in 0..2147483647)"},
      {R"({"prompt": "x", "min_new_tokens": -2})", R"("min_new_tokens" is -2, expected an integer in 0..2147483647)"},
      {R"({"prompt": "x", "top_k": -4294967296})", R"("top_k" is -4294967296, expected an integer in 0..2147483647)"},
      {R"({"prompt": "x", "seed": -3})", R"("seed" is -3, expected an integer in 0..18446744073709551615)"},
      {R"({"prompt_ids": [-1]})", R"("prompt_ids[0]" is -1, expected an integer in 0..257)"},
      // fractional, or a float literal
      {R"({"prompt": "x", "max_new_tokens": 2.5})", R"("max_new_tokens" is 2.5 (a number with a fraction), expected an integer in 0..2147483647)"},
      {R"({"prompt": "x", "max_new_tokens": 4.0})", R"("max_new_tokens" is 4.0 (a number written with a fraction or exponent), expected an integer in 0..2147483647)"},
      {R"({"prompt": "x", "seed": 1.5})", R"("seed" is 1.5 (a number with a fraction), expected an integer in 0..18446744073709551615)"},
      {R"({"prompt": "x", "max_new_tokens": 1e3})",  // shown as parsed, so say why it is not an integer
       R"("max_new_tokens" is 1000.0 (a number written with a fraction or exponent), expected an integer in 0..2147483647)"},
      {R"({"prompt": "x", "seed": -18446744073709551616})",  // parsed as a float: -2^64
       R"("seed" is -1.8446744073709552e+19 (a number beyond the 64-bit integer range), expected an integer in 0..18446744073709551615)"},
      {R"({"prompt": "x", "seed": -9223372036854775809})",  // a float: rounds to -2^63, as -9.223372036854775808e18 does
       R"("seed" is -9.223372036854776e+18 (an integer beyond the 64-bit range, or a number written with a fraction or exponent), expected an integer in 0..18446744073709551615)"},
      {R"({"prompt_ids": [1, 2.5]})", R"("prompt_ids[1]" is 2.5 (a number with a fraction), expected an integer in 0..257)"},
      // not a number at all
      {R"({"prompt": "x", "top_k": "3"})", R"("top_k" is "3", expected an integer in 0..2147483647)"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.line);
    const Error e = expect_error([&] { read(c.line); });
    CHECK(std::string(e.what()) == in + ":2: " + c.message);
    CHECK(e.hint() == hint);
  }

  // The boundary values are accepted as they are.
  JsonlRequests r = read(R"({"prompt": "x", "max_new_tokens": 2147483647, "min_new_tokens": 0, "top_k": 2147483647, )"
                         R"("seed": 18446744073709551615})");
  REQUIRE(r.items.size() == 2);
  const SamplingParams& hi = r.items[1].request.params;
  CHECK(hi.max_new_tokens == 2147483647);
  CHECK(hi.min_new_tokens == 0);
  CHECK(hi.top_k == 2147483647);
  CHECK(hi.seed == 18446744073709551615ull);
  CHECK(r.items[0].request.params.max_new_tokens == 8);  // absent: the default
  r = read(R"({"prompt_ids": [0, 257], "max_new_tokens": 0, "seed": 0})");
  REQUIRE(r.items.size() == 2);
  CHECK(r.items[1].request.prompt_ids == std::vector<int32_t>{0, 257});
  CHECK(r.items[1].request.params.max_new_tokens == 0);
  CHECK(r.items[1].request.params.seed == 0);

  // Skip: the bad line is left out and the good one kept.
  std::ofstream(in) << "{\"prompt\": \"x\", \"max_new_tokens\": 4294967297}\n{\"id\": \"ok\", \"prompt\": \"y\"}\n";
  r = read_generate_jsonl(in, tok, defaults, 0, 0, BadRecordPolicy::Skip, false);
  CHECK(r.skipped == 1);
  REQUIRE(r.items.size() == 1);
  CHECK(r.items[0].id == "ok");
}

TEST_CASE("generate --input: resuming refuses stored results of other requests under the same id") {
  test::ByteTokenizer tok;
  test::FakeRunner runner(2);
  RankContext ctx = make_ctx(runner, tok);
  SamplingParams defaults;
  defaults.max_new_tokens = 5;
  const std::string q1 = temp_path("q1.jsonl"), q2 = temp_path("q2.jsonl"), out = temp_path("qo.jsonl");
  std::ofstream(q1) << "{\"prompt\": \"Hello\"}\n{\"prompt\": \"abc\"}\n";  // ids 1, 2 (line numbers)
  std::ofstream(q2) << "{\"prompt\": \"Hello\"}\n{\"prompt\": \"xyz\"}\n";  // id 2 is another prompt
  run_generate_jsonl(ctx, q1, out, defaults, 2);
  const std::string first = slurp(out);
  std::istringstream lines(first);
  std::vector<nlohmann::json> js;
  for (std::string l; std::getline(lines, l);) js.push_back(nlohmann::json::parse(l));
  REQUIRE(js.size() == 2);
  GenerationRequest r;
  r.prompt_ids = tok.encode("abc", true);
  r.params = defaults;
  CHECK(js[1]["request_xxh3"] == request_fingerprint(r));
  CHECK(request_fingerprint(r).size() == 16);

  SUBCASE("the same input resumes: nothing generated, file unchanged") {
    const int64_t before = runner.forwards;
    run_generate_jsonl(ctx, q1, out, defaults, 2);
    CHECK(runner.forwards == before);
    CHECK(slurp(out) == first);
  }
  SUBCASE("another prompt under id 2: error naming the file and the id, file unchanged") {
    const Error e = expect_error([&] { run_generate_jsonl(ctx, q2, out, defaults, 2); });
    CHECK(std::string(e.what()).rfind(out + ": holds a result for id 2 that was made for another request", 0) == 0);
    CHECK(e.hint() == "delete " + out + " or choose another --output");
    CHECK(slurp(out) == first);
  }
  SUBCASE("other sampling settings for the same prompts: refused at id 1") {
    SamplingParams other = defaults;
    other.max_new_tokens = 6;
    const Error e = expect_error([&] { run_generate_jsonl(ctx, q1, out, other, 2); });
    CHECK(std::string(e.what()).rfind(out + ": holds a result for id 1 ", 0) == 0);
    CHECK(std::string(e.what()).find("request_xxh3") != std::string::npos);
    CHECK(slurp(out) == first);
  }
  SUBCASE("a line of an older file (no request_xxh3) is checked by its prompt") {
    for (auto& j : js) j.erase("request_xxh3");
    std::ofstream(out, std::ios::trunc) << js[0].dump() << "\n" << js[1].dump() << "\n";
    const Error e = expect_error([&] { run_generate_jsonl(ctx, q2, out, defaults, 2); });
    CHECK(std::string(e.what()) == out + ": holds a result for id 2 that was made for another request: its \"prompt\" is "
                                         "\"abc\", this input's is \"xyz\"");
    const int64_t before = runner.forwards;
    run_generate_jsonl(ctx, q1, out, defaults, 2);  // same prompts: accepted as done
    CHECK(runner.forwards == before);
  }
  SUBCASE("a stub line (neither request_xxh3 nor prompt) is refused, whatever else it holds") {
    for (const std::string& stub : {std::string("{\"id\": 2}"),
                                   "{\"id\": 2, \"text\": \"x\", \"model_xxh3\": " + js[1]["model_xxh3"].dump() + "}"}) {
      CAPTURE(stub);
      std::ofstream(out, std::ios::trunc) << js[0].dump() << "\n" << stub << "\n";
      const int64_t before = runner.forwards;
      const Error e = expect_error([&] { run_generate_jsonl(ctx, q1, out, defaults, 2); });
      CHECK(std::string(e.what()) == out + ": holds a result for id 2 that cannot be checked: it has neither "
                                           "\"request_xxh3\" nor \"prompt\" (not a line tprun wrote)");
      CHECK(e.hint() == "delete " + out + " or choose another --output");
      CHECK(runner.forwards == before);
    }
  }
  SUBCASE("a line of this request without its result (no text, or text null) is refused as incomplete") {
    nlohmann::json no_text = js[1];
    no_text.erase("text");
    nlohmann::json null_text = js[1];
    null_text["text"] = nullptr;
    for (const nlohmann::json& partial : {no_text, null_text}) {
      CAPTURE(partial.dump());
      std::ofstream(out, std::ios::trunc) << js[0].dump() << "\n" << partial.dump() << "\n";
      const Error e = expect_error([&] { run_generate_jsonl(ctx, q1, out, defaults, 2); });
      CHECK(std::string(e.what()) == out + ": holds a result for id 2 that is incomplete: it has no \"text\" (not a "
                                           "line tprun wrote)");
    }
  }
}

TEST_CASE("triviaqa eval: resuming refuses a predictions file of other questions") {
  test::ByteTokenizer tok;
  test::FakeRunner runner(3);
  RankContext ctx = make_ctx(runner, tok);
  TriviaQaOptions o;
  o.data_path = kData;
  o.shots = 5;
  o.limit = 3;
  o.max_new_tokens = 4;
  o.progress_interval_s = 1e9;
  o.output_path = temp_path("qa_other.jsonl");
  auto data = load_triviaqa(kData);
  const TriviaQaRecord& rec = data.records[5];  // the first scored question
  // An older line (no request_xxh3) under that id, for another question.
  std::ofstream(o.output_path) << "{\"id\": \"" << rec.id << "\", \"question\": \"Who?\", \"prediction\": \"x\"}\n";
  const Error e = expect_error([&] { run_triviaqa_eval(ctx, o); });
  CHECK(std::string(e.what()) == o.output_path + ": holds a result for id \"" + rec.id +
                                     "\" that was made for another request: its \"question\" is \"Who?\", this "
                                     "input's is " + nlohmann::json(rec.question).dump());
  CHECK(runner.forwards == 0);
  // Other shots change every prompt: a run with 4 shots refuses the 5-shot file.
  std::filesystem::remove(o.output_path);
  run_triviaqa_eval(ctx, o);
  o.shots = 4;
  const Error e2 = expect_error([&] { run_triviaqa_eval(ctx, o); });
  CHECK(std::string(e2.what()).find("request_xxh3") != std::string::npos);
}

TEST_CASE("generate --input: \"messages\" records are rendered with the chat template; one of messages / prompt") {
  test::ByteTokenizer tok;
  SamplingParams defaults;
  defaults.max_new_tokens = 4;
  const ChatTemplate chatml = chatml_template();
  const JsonlChat chat{&chatml, ""};
  const std::string in = temp_path("messages.jsonl");
  std::ofstream(in) << R"({"id": "m", "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi\n\"there\""}]})"
                    << "\n" << R"({"id": "p", "prompt": "plain"})" << "\n";
  const JsonlRequests r = read_generate_jsonl(in, tok, defaults, 0, 0, BadRecordPolicy::Stop, false, chat);
  REQUIRE(r.items.size() == 2);
  const std::string rendered =
      "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi\n\"there\"<|im_end|>\n<|im_start|>assistant\n";
  CHECK(r.prompts[0] == rendered);
  CHECK(r.items[0].request.prompt_ids == tok.encode(rendered, false));  // no BOS added: the template owns it
  CHECK(r.prompts[1] == "plain");
  CHECK(r.items[1].request.prompt_ids == tok.encode("plain", true));

  struct Case {
    std::string line, message;
  };
  const Case bad[] = {
      {R"({"messages": [{"role": "user", "content": "x"}], "prompt": "y"})",
       ":2: both \"messages\" and \"prompt\"/\"prompt_ids\"; a record has one of them"},
      {R"({"messages": [{"role": "user", "content": "x"}], "prompt_ids": [5]})",
       ":2: both \"messages\" and \"prompt\"/\"prompt_ids\"; a record has one of them"},
      {R"({"messages": []})", ":2: \"messages\" must be a non-empty list of {\"role\", \"content\"}"},
      {R"({"messages": "hi"})", ":2: \"messages\" must be a non-empty list of {\"role\", \"content\"}"},
      {R"({"messages": [{"role": "user"}]})", ":2: messages[0] needs string \"role\" and \"content\""},
      {R"({"id": 7})", ":2: no \"prompt\" (string), \"prompt_ids\" (list) or \"messages\" (list)"},
      {R"({"id": 8, "prompt": 5})", ":2: \"prompt\" must be a string, got number"},
  };
  for (const Case& c : bad) {
    CAPTURE(c.line);
    std::ofstream(in) << "{\"prompt\": \"ok\"}\n" << c.line << "\n";
    CHECK_THROWS_WITH_AS(read_generate_jsonl(in, tok, defaults, 0, 0, BadRecordPolicy::Stop, false, chat),
                         doctest::Contains((in + c.message).c_str()), Error);
  }
  // No template: the record is a bad line that says why and names --chat-template.
  std::ofstream(in) << "{\"prompt\": \"ok\"}\n" << R"({"messages": [{"role": "user", "content": "x"}]})" << "\n";
  try {
    read_generate_jsonl(in, tok, defaults, 0, 0, BadRecordPolicy::Stop, false, JsonlChat{nullptr, "MODEL/tokenizer_config.json: has no \"chat_template\""});
    FAIL("accepted");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find(in + ":2: \"messages\" needs a chat template, and there is none: MODEL/tokenizer_config.json") == 0);
    CHECK(e.hint().find("--chat-template FILE") != std::string::npos);
  }
  // The template's own refusal names the line and keeps the template's message.
  const ChatTemplate gemma = load_chat_template_file(TPSHARD_TEST_FIXTURES "/chat_templates/gemma2.jinja", "/nonexistent");
  std::ofstream(in) << R"({"messages": [{"role": "system", "content": "x"}, {"role": "user", "content": "y"}]})" << "\n";
  CHECK_THROWS_WITH_AS(read_generate_jsonl(in, tok, defaults, 0, 0, BadRecordPolicy::Stop, false, JsonlChat{&gemma, ""}),
                       doctest::Contains("System role not supported"), Error);
  // Skip leaves such a line out.
  const JsonlRequests s = read_generate_jsonl(in, tok, defaults, 0, 0, BadRecordPolicy::Skip, false, JsonlChat{&gemma, ""});
  CHECK(s.items.empty());
  CHECK(s.skipped == 1);
}

TEST_CASE("generate --input: run_generate_jsonl renders \"messages\" with options.chat_template_file") {
  test::ByteTokenizer tok;
  test::FakeRunner runner(2);
  RankContext ctx = make_ctx(runner, tok);
  ctx.model_dir = "/nonexistent-model";  // no tokenizer_config.json: special tokens absent, template from the file
  SamplingParams defaults;
  defaults.max_new_tokens = 3;
  const std::string in = temp_path("chat_in.jsonl"), out = temp_path("chat_out.jsonl");
  std::ofstream(in) << R"({"id": 1, "messages": [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}, {"role": "user", "content": "3+3?"}]})"
                    << "\n";
  GenerateJsonlOptions options;
  options.chat_template_file = TPSHARD_TEST_FIXTURES "/chat_templates/phi3.5.jinja";
  run_generate_jsonl(ctx, in, out, defaults, 2, options);
  const nlohmann::json line = nlohmann::json::parse(slurp(out).substr(0, slurp(out).find('\n')));
  CHECK(line["prompt"] == "<|user|>\n2+2?<|end|>\n<|assistant|>\n4<|end|>\n<|user|>\n3+3?<|end|>\n<|assistant|>\n");
  CHECK(line["prompt_tokens"] == tok.encode(line["prompt"].get<std::string>(), false).size());
  // Without the file the model dir's template is used, and there is none: the line is refused.
  CHECK_THROWS_WITH_AS(run_generate_jsonl(ctx, in, temp_path("chat_out2.jsonl"), defaults, 2),
                       doctest::Contains((in + ":1: \"messages\" needs a chat template").c_str()), Error);
}
