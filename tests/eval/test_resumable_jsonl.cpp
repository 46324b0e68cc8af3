// test_resumable_jsonl.cpp: the results file: torn-line cutting, appends, the final reorder, and the
// progress line's figures.
#include <doctest/doctest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "eval/json_fields.h"
#include "common/progress.h"
#include "eval/resumable_jsonl.h"
#include "format/error.h"

using namespace tpshard;
using namespace tpshard::eval;

namespace {
std::string temp_path(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() / ("tpshard_test_eval_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::string p = (dir / name).string();
  std::filesystem::remove(p);
  return p;
}
std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}
void spit(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }
}  // namespace

TEST_CASE("id_key keeps the JSON type") {
  CHECK(id_key(nlohmann::json("q1")) == "\"q1\"");
  CHECK(id_key(nlohmann::json(7)) == "7");
  CHECK(id_key(nlohmann::json("7")) != id_key(nlohmann::json(7)));
}

TEST_CASE("a missing file reads as empty; a torn last line is ignored, then cut by the writer") {
  std::string p = temp_path("torn.jsonl");
  CHECK(read_jsonl_results(p).lines.empty());
  spit(p, "{\"id\":\"a\",\"x\":1}\n\n{\"id\":2,\"x\":2}\n{\"id\":\"c\",\"x\"");
  JsonlContents c = read_jsonl_results(p);
  CHECK(c.keys == std::vector<std::string>{"\"a\"", "2"});
  CHECK(c.torn_bytes == 13);
  {
    ResumableJsonlWriter w(p);
    CHECK(w.truncated_bytes() == 13);
    CHECK(slurp(p) == "{\"id\":\"a\",\"x\":1}\n\n{\"id\":2,\"x\":2}\n");
    w.append({"{\"id\":\"c\",\"x\":3}", "{\"id\":\"d\",\"x\":4}"});
    w.append({});
  }
  CHECK(slurp(p) == "{\"id\":\"a\",\"x\":1}\n\n{\"id\":2,\"x\":2}\n{\"id\":\"c\",\"x\":3}\n{\"id\":\"d\",\"x\":4}\n");
  ResumableJsonlWriter again(p);
  CHECK(again.truncated_bytes() == 0);
  // A second job on the same output is refused while the first holds it.
  try {
    ResumableJsonlWriter second(p);
    FAIL("expected an Error");
  } catch (const tpshard::Error& e) {
    CHECK(std::string(e.what()) == p + ": another job is writing this file");
  }
}

TEST_CASE("a complete line that is not a results object is an error naming the line") {
  std::string p = temp_path("corrupt.jsonl");
  spit(p, "{\"id\":1}\nnot json\n");
  try {
    read_jsonl_results(p);
    FAIL("expected an Error");
  } catch (const tpshard::Error& e) {
    CHECK(std::string(e.what()).rfind(p + ":2: not a results line", 0) == 0);
  }
}

TEST_CASE("rewrite in input order; unknown ids keep their order at the end") {
  std::string p = temp_path("order.jsonl");
  spit(p, "{\"id\":3}\n{\"id\":\"x\"}\n{\"id\":1}\n{\"id\":\"y\"}\n{\"id\":2}\n");
  rewrite_jsonl_in_order(p, {"1", "2", "3", "4"});
  CHECK(slurp(p) == "{\"id\":1}\n{\"id\":2}\n{\"id\":3}\n{\"id\":\"x\"}\n{\"id\":\"y\"}\n");
  CHECK(!std::filesystem::exists(p + ".tmp"));
}

TEST_CASE("progress: counts, rates and durations") {
  CHECK(format_duration(7.2) == "7s");
  CHECK(format_duration(245) == "4m05s");
  CHECK(format_duration(3723) == "1h02m03s");
  std::string p = temp_path("progress.txt");
  std::FILE* f = std::fopen(p.c_str(), "w");
  {
    Progress prog("job", 10, ProgressUnit::Prompts, true, 0.0, f, 4);
    prog.add(2, 50);
    CHECK(prog.done() == 6);
    CHECK(prog.tokens() == 50);
    CHECK(prog.status_text().rfind("6/10  ", 0) == 0);
    prog.add(4, 10);
    prog.finish();
  }
  std::fclose(f);
  std::string text = slurp(p);
  CHECK(text.rfind("job: resuming, 4 of 10 already done\njob: 6/10  ", 0) == 0);  // not a terminal: plain lines
  CHECK(text.find("job: 10/10  ") != std::string::npos);
  CHECK(text.find("ETA 0s\n") != std::string::npos);
  CHECK(text.find("job: 10/10") == text.rfind("job: 10/10"));  // finish() does not repeat the last line
}

TEST_CASE("progress in bytes: a final line per phase in a log; silent when the phase ends before min_seconds") {
  const std::string p = temp_path("progress_bytes.txt");
  std::FILE* f = std::fopen(p.c_str(), "w");
  {
    Progress load("loading", 3u << 20, ProgressUnit::Bytes, true, 10.0, f);
    load.add(1u << 20);
    load.add(2u << 20);
    CHECK(load.status_text().rfind("3.00 MiB / 3.00 MiB  ", 0) == 0);
  }  // the destructor finishes
  {
    Progress quick("quick", 100, ProgressUnit::Bytes, true, 10.0, f, 0, /*min_seconds=*/100.0);
    quick.add(100);
  }
  std::fclose(f);
  const std::string text = slurp(p);
  CHECK(text.rfind("loading: 3.00 MiB / 3.00 MiB  ", 0) == 0);
  CHECK(text.find("ETA 0s\n") != std::string::npos);
  CHECK(text.find("quick") == std::string::npos);
}

TEST_CASE("a job that fails before writing leaves no output file it created; an existing file is kept") {
  const std::string fresh = temp_path("refused.jsonl");
  try {
    ResumableJsonlWriter w(fresh);
    CHECK(std::filesystem::exists(fresh));
    throw std::runtime_error("the job was refused");
  } catch (const std::runtime_error&) {
  }
  CHECK_FALSE(std::filesystem::exists(fresh));

  const std::string existing = temp_path("existing.jsonl");
  spit(existing, "{\"id\":\"a\"}\n");
  try {
    ResumableJsonlWriter w(existing);
    throw std::runtime_error("the job was refused");
  } catch (const std::runtime_error&) {
  }
  CHECK(slurp(existing) == "{\"id\":\"a\"}\n");

  const std::string written = temp_path("written.jsonl");
  try {
    ResumableJsonlWriter w(written);
    w.append({"{\"id\":\"b\"}"});
    throw std::runtime_error("failed after the first batch");
  } catch (const std::runtime_error&) {
  }
  CHECK(slurp(written) == "{\"id\":\"b\"}\n");  // results already written are kept for the resume
}

TEST_CASE("a results file or input line nested thousands of levels deep is refused, naming the line") {
  const std::string deep = std::string(3000, '[') + std::string(3000, ']');
  const std::string path = (std::filesystem::temp_directory_path() / ("tpshard_deep_" + std::to_string(::getpid()) + ".jsonl")).string();
  std::ofstream(path) << "{\"id\": 1, \"x\": 2}\n{\"id\": " << deep << "}\n";
  CHECK_THROWS_WITH_AS(tpshard::eval::read_jsonl_results(path), doctest::Contains(":2: JSON nested deeper than 100 levels"),
                       tpshard::Error);
  CHECK_THROWS_WITH_AS(tpshard::eval::parse_jsonl_line("{\"prompt\": " + deep + "}", "in.jsonl:7", "fix it"),
                       doctest::Contains("in.jsonl:7: JSON nested deeper"), tpshard::Error);
  std::filesystem::remove(path);
}

TEST_CASE("a JSONL line with a number beyond double's range (1e320) is an Error naming the line, not an escaped exception") {
  CHECK_THROWS_WITH_AS(tpshard::eval::parse_jsonl_line("{\"id\": 1e320, \"prompt\": \"x\"}", "in.jsonl:3", "fix it"),
                       doctest::Contains("in.jsonl:3: not valid JSON"), tpshard::Error);
  // the input fuzz_jsonl found (tests/fixtures/fuzz/jsonl_number_1e320.jsonl)
  std::ifstream f(std::string(TPSHARD_TEST_FIXTURES) + "/fuzz/jsonl_number_1e320.jsonl");
  std::string line;
  REQUIRE(std::getline(f, line));
  CHECK_THROWS_WITH_AS(tpshard::eval::parse_jsonl_line(line, "in.jsonl:4", "fix it"), doctest::Contains("in.jsonl:4"),
                       tpshard::Error);
}
