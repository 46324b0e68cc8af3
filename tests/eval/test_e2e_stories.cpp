// test_e2e_stories.cpp: `eval triviaqa` end to end on the real stories260K model (converted here with
// the tpshard executable) on the CPU backend at tp_size 2, over the 32 sample questions. Scores are
// near zero for a 260K-parameter story model; the test checks the pipeline: 32 valid prediction lines,
// written once (rank 0 only), EM/F1 in [0, 1] and equal to a recomputation from the predictions file.
#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>

#include "eval/answer_normalize.h"
#include "eval/triviaqa_eval.h"
#include "runtime/session.h"

using namespace tpshard;
using namespace tpshard::eval;

TEST_CASE("eval triviaqa on stories260K, CPU backend, tp 2") {
  const std::string hf_dir = TPSHARD_TEST_FIXTURES "/stories260K";
  if (!std::filesystem::exists(hf_dir + "/model.safetensors")) {
    MESSAGE("tests/fixtures/stories260K has no model.safetensors; skipped");
    return;
  }
  const std::string work = TPSHARD_TEST_WORK_DIR "/e2e_stories";
  std::filesystem::create_directories(work);
  const std::string model_dir = work + "/model";
  const std::string cmd = std::string("\"") + TPSHARD_CONVERTER + "\" convert \"" + hf_dir + "\" -o \"" + model_dir +
                          "\" --tp 2 --force -q";
  REQUIRE(std::system(cmd.c_str()) == 0);

  TriviaQaOptions o;
  o.data_path = TPSHARD_TEST_FIXTURES "/triviaqa/validation_sample.hf_layout.jsonl";
  o.shots_from = TPSHARD_TEST_FIXTURES "/triviaqa/triviaqa_sample.official.json";
  o.shots = 1;
  o.max_new_tokens = 10;
  o.batch_size = 8;
  o.output_path = work + "/preds.jsonl";
  o.progress_interval_s = 1e9;
  std::filesystem::remove(o.output_path);
  std::filesystem::remove(o.output_path + ".summary.json");

  SessionOptions s;
  s.model_dir = model_dir;
  s.tp_size = 2;
  s.device = Device::Cpu;
  s.max_batch = 4;
  s.max_seq_len = 512;
  s.cpu_threads = 1;
  s.quiet = true;
  std::mutex mu;
  TriviaQaSummary summary;
  run_on_ranks(s, [&](RankContext& ctx) {
    TriviaQaSummary r = run_triviaqa_eval(ctx, o);
    std::lock_guard<std::mutex> lock(mu);
    if (ctx.tp_rank == 0) summary = r;
  });

  CHECK(summary.questions == 32);
  CHECK(summary.scores.n == 32);
  CHECK(summary.generated == 32);
  CHECK(summary.output_tokens > 0);
  CHECK(summary.scores.exact_match >= 0.0);
  CHECK(summary.scores.exact_match <= 1.0);
  CHECK(summary.scores.f1 >= 0.0);
  CHECK(summary.scores.f1 <= 1.0);

  std::ifstream f(o.output_path);
  std::set<std::string> ids;
  double em = 0, f1 = 0;
  size_t n = 0;
  for (std::string line; std::getline(f, line); ++n) {
    auto j = nlohmann::json::parse(line);  // throws (fails the test) on a broken line
    ids.insert(j.at("id").get<std::string>());
    AnswerScore a = score_answer(j.at("prediction").get<std::string>(), j.at("answers").get<std::vector<std::string>>());
    CHECK(j.at("exact_match").get<double>() == a.exact_match);
    CHECK(j.at("f1").get<double>() == doctest::Approx(a.f1));
    CHECK(j.at("prediction").get<std::string>().find('\n') == std::string::npos);
    em += a.exact_match;
    f1 += a.f1;
  }
  CHECK(n == 32);
  CHECK(ids.size() == 32);
  CHECK(summary.scores.exact_match == doctest::Approx(em / 32));
  CHECK(summary.scores.f1 == doctest::Approx(f1 / 32));
  auto sj = nlohmann::json::parse(std::ifstream(o.output_path + ".summary.json"));
  CHECK(sj.at("n") == 32);
  CHECK(sj.at("exact_match").get<double>() == doctest::Approx(em / 32));
  CHECK(sj.at("f1").get<double>() == doctest::Approx(f1 / 32));
}
