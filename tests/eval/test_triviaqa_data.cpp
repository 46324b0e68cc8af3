// test_triviaqa_data.cpp: the TriviaQA readers on the committed fixtures (HF JSONL, the original
// release JSON, llm-foundry JSONL) and the bad-record policy.
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include <unistd.h>

#include "eval/json_fields.h"
#include "eval/triviaqa_data.h"
#include "format/error.h"

using namespace tpshard::eval;

namespace {
const std::string kDir = TPSHARD_TEST_FIXTURES "/triviaqa/";

bool has(const std::vector<std::string>& v, const std::string& s) { return std::find(v.begin(), v.end(), s) != v.end(); }

std::string write_temp(const std::string& name, const std::string& text) {
  auto dir = std::filesystem::temp_directory_path() / ("tpshard_test_eval_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::string path = (dir / name).string();
  std::ofstream(path, std::ios::binary) << text;
  return path;
}
}  // namespace

TEST_CASE("HF rc.nocontext JSONL: 32 records in file order") {
  auto r = load_triviaqa(kDir + "validation_sample.hf_layout.jsonl");
  REQUIRE(r.records.size() == 32);
  CHECK(r.warnings.empty());
  CHECK(r.records[0].id == "lf_0000");
  CHECK(r.records[0].question == "Who was the man behind The Chipmunks?");
  CHECK(r.records[0].answer == "David Seville");
  CHECK(r.records[0].ground_truths == std::vector<std::string>{"david seville"});
  CHECK(r.records[31].id == "lf_0031");
  CHECK(r.records[0].source == kDir + "validation_sample.hf_layout.jsonl:1");
  // lf_0003: normalized_aliases first, then aliases whose normalization is new, then the value.
  const auto& cb = r.records[3];
  CHECK(cb.answer == "Campbell-Bannerman");
  CHECK(has(cb.ground_truths, "campbellbannerman"));
  CHECK(has(cb.ground_truths, "campbell bannerman"));
  CHECK(!has(cb.ground_truths, "Campbell Bannerman"));  // same normalization as "campbell bannerman"
}

TEST_CASE("the same question in the HF layout and the original release layout") {
  auto hf = load_triviaqa(kDir + "tc_33.hf_layout.derived.jsonl");
  auto orig = load_triviaqa(kDir + "triviaqa_sample.official.json");
  REQUIRE(hf.records.size() == 1);
  REQUIRE(orig.records.size() == 1);
  const auto& a = hf.records[0];
  const auto& b = orig.records[0];
  CHECK(a.id == "tc_33");
  CHECK(b.id == "tc_33");
  CHECK(a.question == "Which Lloyd Webber musical premiered in the US on 10th December 1993?");
  CHECK(b.question == a.question);
  CHECK(a.answer == "Sunset Boulevard");
  CHECK(b.answer == "Sunset Boulevard");
  CHECK(a.ground_truths == b.ground_truths);
  CHECK(a.ground_truths ==
        std::vector<std::string>{"west sunset boulevard", "sunset blvd", "sunset boulevard", "sunset bulevard"});
  CHECK(b.source == kDir + "triviaqa_sample.official.json: Data[0]");
}

TEST_CASE("llm-foundry layout: question from the context, ids from line numbers") {
  auto r = load_triviaqa(kDir + "llm-foundry_triviaqa_small.converted-layout.jsonl");
  REQUIRE(r.records.size() == 32);
  CHECK(r.records[0].id == "line-1");
  CHECK(r.records[0].question == "Who was the man behind The Chipmunks?");
  CHECK(r.records[1].answer == "Scorpio");
  CHECK(has(r.records[1].ground_truths, "Skorpio"));
}

TEST_CASE("bad records: stop names file and line; skip warns and keeps the rest") {
  std::string path = write_temp("bad.jsonl",
                                "{\"question\": \"Q1?\", \"question_id\": \"a\", \"answer\": {\"value\": \"A1\"}}\n"
                                "{\"question\": \"Q2?\", \"question_id\": \"b\"\n"
                                "\n"
                                "{\"question_id\": \"c\", \"answer\": {\"value\": \"A3\"}}\n"
                                "{\"question\": \"Q4?\", \"question_id\": \"d\", \"answer\": {\"aliases\": []}}\n"
                                "{\"question\": \"Q5?\", \"question_id\": \"a\", \"answer\": {\"value\": \"A5\"}}\n"
                                "{\"question\": \"Q6?\", \"question_id\": \"f\", \"answer\": {\"aliases\": [\"A6\"]}}\n");
  try {
    load_triviaqa(path, BadRecordPolicy::Stop);
    FAIL("expected an Error");
  } catch (const tpshard::Error& e) {
    CHECK(std::string(e.what()) == path + ":2:39: not valid JSON: syntax error while parsing object - unexpected end of "
                                          "input; expected '}'");
  }
  auto r = load_triviaqa(path, BadRecordPolicy::Skip);
  REQUIRE(r.records.size() == 2);
  CHECK(r.records[0].id == "a");
  CHECK(r.records[1].id == "f");
  CHECK(r.records[1].answer == "A6");
  REQUIRE(r.warnings.size() == 4);
  CHECK(r.warnings[0] == path + ":2:39: not valid JSON: syntax error while parsing object - unexpected end of input; "
                            "expected '}' (skipped)");
  CHECK(r.warnings[1].rfind(path + ":4: record has no question", 0) == 0);
  CHECK(r.warnings[2].rfind(path + ":5: record 'd' has no answer", 0) == 0);
  CHECK(r.warnings[3].rfind(path + ":6: duplicate question id 'a'", 0) == 0);
  CHECK(parse_bad_record_policy("skip") == BadRecordPolicy::Skip);
  CHECK_THROWS_AS(parse_bad_record_policy("ignore"), tpshard::Error);
  CHECK_THROWS_AS(load_triviaqa(kDir + "no_such_file.jsonl"), tpshard::Error);
}

TEST_CASE("a JSON array of HF records, and a bad record inside the original layout's Data list") {
  std::string arr = write_temp("array.json",
                               "[{\"question\": \"Q1?\", \"question_id\": \"a\", \"answer\": {\"value\": \"A1\"}},\n"
                               " {\"question\": \"Q2?\", \"question_id\": \"b\", \"answer\": {\"aliases\": [\"A2\", \"a2\"]}}]\n");
  auto r = load_triviaqa(arr);
  REQUIRE(r.records.size() == 2);
  CHECK(r.records[1].id == "b");
  CHECK(r.records[1].answer == "A2");
  CHECK(r.records[1].ground_truths == std::vector<std::string>{"A2"});  // "a2" normalizes the same
  CHECK(r.records[1].source == arr + ": [1]");

  std::string orig = write_temp("orig.json",
                                "{\"Data\": [{\"Question\": \"Q?\", \"QuestionId\": \"x\", \"Answer\": "
                                "{\"Value\": \"V\", \"NormalizedAliases\": [\"v\"], \"HumanAnswers\": [\"Vee\"]}},"
                                " {\"Question\": 7, \"QuestionId\": \"y\", \"Answer\": {\"Value\": \"W\"}}], \"Version\": 1.0}");
  try {
    load_triviaqa(orig);
    FAIL("expected an Error");
  } catch (const tpshard::Error& e) {
    CHECK(std::string(e.what()) == orig + ": Data[1]: field 'question' is number, expected a string");
  }
  auto skipped = load_triviaqa(orig, BadRecordPolicy::Skip);
  REQUIRE(skipped.records.size() == 1);
  CHECK(skipped.records[0].ground_truths == std::vector<std::string>{"v", "Vee"});
  CHECK(skipped.warnings.size() == 1);
}

TEST_CASE("integer question ids keep their exact decimal text, beyond 2^63 too; a fractional id is refused") {
  const std::string path =
      write_temp("int_ids.jsonl", "{\"question\": \"Q1?\", \"question_id\": 18446744073709551615, \"answer\": \"A1\"}\n"
                                  "{\"question\": \"Q2?\", \"question_id\": -9223372036854775808, \"answer\": \"A2\"}\n"
                                  "{\"question\": \"Q3?\", \"question_id\": 7, \"answer\": \"A3\"}\n");
  const auto r = load_triviaqa(path);
  REQUIRE(r.records.size() == 3);
  CHECK(r.records[0].id == "18446744073709551615");  // get<long long>() read it as -1
  CHECK(r.records[1].id == "-9223372036854775808");
  CHECK(r.records[2].id == "7");
  const std::string bad = write_temp("frac_id.jsonl", "{\"question\": \"Q?\", \"question_id\": 2.5, \"answer\": \"A\"}\n");
  try {
    load_triviaqa(bad);
    FAIL("expected an Error");
  } catch (const tpshard::Error& e) {
    CHECK(std::string(e.what()) == bad + ":1: field 'question_id' is number, expected a string");
  }
}

TEST_CASE("parse_jsonl_line: the column of a syntax error; a key repeated in one object is refused") {
  using tpshard::eval::parse_jsonl_line;
  auto error_of = [](const std::string& line) -> std::string {
    try {
      parse_jsonl_line(line, "f.jsonl:7", "the hint");
    } catch (const tpshard::Error& e) {
      CHECK(e.hint() == "the hint");
      return e.what();
    }
    return "";
  };
  CHECK(error_of("{\"a\": 1, b: 2}") ==
        "f.jsonl:7:10: not valid JSON: syntax error while parsing object key - invalid literal; last read: "
        "'1, b'; expected string literal");
  CHECK(error_of("nope") == "f.jsonl:7:2: not valid JSON: syntax error while parsing value - invalid literal; "
                            "last read: 'no'");
  CHECK(error_of("{\"prompt\": \"x\", \"id\": 1, \"prompt\": \"y\"}") ==
        "f.jsonl:7: key \"prompt\" appears twice in one object");
  CHECK(error_of("{\"answer\": {\"aliases\": [], \"aliases\": [\"b\"]}}") ==
        "f.jsonl:7: key \"aliases\" appears twice in one object");
  // The same key in different objects (or in an array of objects) is fine, and values come through.
  const auto j = parse_jsonl_line("{\"a\": {\"v\": 1}, \"b\": {\"v\": 2}, \"c\": [{\"v\": 3}, {\"v\": 4}]}", "f", "h");
  CHECK(j["b"]["v"] == 2);
  CHECK(j["c"][1]["v"] == 4);
  CHECK(parse_jsonl_line("[1, 2]", "f", "h").size() == 2);
}
