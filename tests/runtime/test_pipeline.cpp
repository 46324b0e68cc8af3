// test_pipeline.cpp: pipeline stages and data-parallel replicas on the CPU backend. Every layout
// (tp x pp, dp x tp) of the fixtures must give the 1 x 1 job's last logits (within 1e-4) and greedy ids,
// a batch job split over replicas must write the same file as one replica (and resume to it from an
// interrupted file whatever dp ran before), and a failing stage must end the whole job with its error.
#include <doctest/doctest.h>

#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "format/error.h"
#include "format/shard_file.h"
#include "runtime/generate.h"
#include "runtime/prompt_scores.h"
#include "runtime/session.h"
#include "fakes.h"

using namespace tpshard;
namespace fs = std::filesystem;

namespace {

struct Layout {
  int tp = 1, pp = 1, dp = 1;
};

std::string text(const Layout& l) {
  return "tp " + std::to_string(l.tp) + " x pp " + std::to_string(l.pp) + " x dp " + std::to_string(l.dp);
}

/// Convert tests/fixtures/NAME with --tp 1,2 --pp PPS into the build dir (once per name).
std::string converted(const std::string& name, const std::string& pps) {
  static std::map<std::string, std::string> done;
  static std::mutex m;
  std::lock_guard<std::mutex> lock(m);
  auto it = done.find(name);
  if (it != done.end()) return it->second;
  fs::create_directories(TPSHARD_TEST_OUT_DIR);
  const std::string out = std::string(TPSHARD_TEST_OUT_DIR) + "/pp_" + name;
  const std::string cmd = std::string(TPSHARD_BIN_DIR) + "/tpshard convert " + TPSHARD_FIXTURES_DIR + "/" + name +
                          " -o " + out + " --tp 1,2 --pp " + pps + " --force -q 2>/dev/null";
  INFO("command: " << cmd);
  REQUIRE(std::system(cmd.c_str()) == 0);
  done[name] = out;
  return out;
}

SessionOptions options(const std::string& dir, const Layout& l, int max_batch) {
  SessionOptions o;
  o.model_dir = dir;
  o.tp_size = l.tp;
  o.pp_size = l.pp;
  o.dp_size = l.dp;
  o.device = Device::Cpu;
  o.max_batch = max_batch;
  o.quiet = true;
  o.cpu_threads = 1;
  return o;
}

/// Last logits of every prompt in one forward (several chunks: several micro-batches), as every replica's
/// output rank sees them; checks that all ranks of the job got the same.
std::vector<std::vector<float>> step_logits(const std::string& dir, const Layout& l,
                                            const std::vector<std::vector<int32_t>>& prompts) {
  std::mutex m;
  std::vector<std::vector<float>> first;
  bool differ = false;
  run_on_ranks(options(dir, l, static_cast<int>(prompts.size())), [&](RankContext& ctx) {
    std::vector<SeqChunk> chunks;
    for (size_t i = 0; i < prompts.size(); ++i) chunks.push_back({static_cast<int>(i), 0, prompts[i]});
    const int64_t V = ctx.runner->config().vocab_size;
    std::vector<float> logits(chunks.size() * V);
    std::vector<int32_t> argmax(chunks.size());
    ctx.runner->forward(chunks, logits.data(), argmax.data());
    std::vector<std::vector<float>> mine;
    for (size_t i = 0; i < chunks.size(); ++i) mine.emplace_back(logits.begin() + i * V, logits.begin() + (i + 1) * V);
    std::lock_guard<std::mutex> lock(m);
    if (first.empty()) first = mine;
    else if (mine != first) differ = true;  // every stage, tp_rank and replica gets the same bits
  });
  CHECK_FALSE(differ);
  return first;
}

std::vector<std::vector<int32_t>> greedy_ids(const std::string& dir, const Layout& l,
                                             const std::vector<std::vector<int32_t>>& prompts, int new_tokens,
                                             int max_batch = 2) {
  std::mutex m;
  std::vector<std::vector<int32_t>> out;
  testing::FakeTokenizer fake;
  run_on_ranks(options(dir, l, max_batch), [&](RankContext& ctx) {  // 2 slots: continuous batching
    std::vector<GenerationRequest> reqs;
    for (size_t i = 0; i < prompts.size(); ++i) {
      SamplingParams p;
      p.max_new_tokens = new_tokens;
      p.ignore_eos = true;
      reqs.push_back({std::to_string(i), prompts[i], p});
    }
    const Tokenizer& tok = ctx.tokenizer ? *ctx.tokenizer : static_cast<const Tokenizer&>(fake);
    const auto res = generate(*ctx.runner, tok, reqs);
    std::lock_guard<std::mutex> lock(m);
    if (ctx.is_output_rank())
      for (const auto& r : res) out.push_back(r.output_ids);
  });
  return out;
}

void check_layouts(const std::string& name, const std::string& pps, const std::vector<Layout>& layouts) {
  const std::string dir = converted(name, pps);
  const std::vector<std::vector<int32_t>> prompts = {{1, 7, 3, 9, 4}, {2, 5}, {11, 3, 8, 1, 6, 2, 7}, {4}};
  const auto ref_logits = step_logits(dir, {}, prompts);
  const auto ref_ids = greedy_ids(dir, {}, prompts, 12);
  for (const Layout& l : layouts) {
    CAPTURE(name);
    CAPTURE(text(l));
    const auto logits = step_logits(dir, l, prompts);
    REQUIRE(logits.size() == ref_logits.size());
    double worst = 0;
    for (size_t i = 0; i < logits.size(); ++i)
      for (size_t v = 0; v < logits[i].size(); ++v)
        worst = std::max(worst, std::abs(static_cast<double>(logits[i][v]) - ref_logits[i][v]));
    CHECK(worst <= 1e-4);
    CHECK(greedy_ids(dir, l, prompts, 12) == ref_ids);
  }
}

int run_tprun(const std::string& args, const std::string& log) {
  const std::string cmd = std::string(TPSHARD_BIN_DIR) + "/tprun " + args + " > " + log + " 2>&1";
  return std::system(cmd.c_str());
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

}  // namespace

TEST_CASE("pipeline stages and replicas give the 1 x 1 logits and greedy ids: tiny-llama (tied), GPT-NeoX") {
  const std::vector<Layout> layouts = {{1, 2, 1}, {2, 2, 1}, {2, 1, 2}, {1, 2, 2}};
  check_layouts("tiny-llama", "1,2", layouts);
  check_layouts("tiny-gpt-neox-par", "1,2", layouts);
}

TEST_CASE("pipeline stages over 4 and 5 layers: GPT-Neo at pp 2, 3, 4; stories260K at pp 3, 5 and tp 2 x pp 2") {
  check_layouts("tiny-gpt-neo", "1,2,3,4", {{1, 2, 1}, {1, 3, 1}, {1, 4, 1}, {2, 3, 1}});
  check_layouts("stories260K", "1,2,3,5", {{1, 3, 1}, {2, 2, 1}, {1, 5, 1}, {2, 1, 2}});
}

TEST_CASE("prompts with a shared prefix across pipeline stages give the one-stage greedy ids") {
  const std::string dir = converted("stories260K", "1,2,3,5");
  std::vector<int32_t> prefix = {1};
  for (int i = 0; i < 24; ++i) prefix.push_back(5 + (i * 29) % 400);
  std::vector<std::vector<int32_t>> prompts(3, prefix);
  prompts[0].push_back(12);
  prompts[1].insert(prompts[1].end(), {77, 3});
  prompts[2].insert(prompts[2].end(), {140, 9, 60, 2});
  const auto ref = greedy_ids(dir, {}, prompts, 10, 1);  // one slot: nothing shared
  REQUIRE(ref.size() == 3);
  for (const Layout& l : {Layout{1, 1, 1}, Layout{1, 2, 1}, Layout{2, 2, 1}, Layout{1, 3, 2}}) {
    CAPTURE(text(l));
    CHECK(greedy_ids(dir, l, prompts, 10, 4) == ref);
  }
}

TEST_CASE("prompt log-probabilities across pipeline stages equal the one-stage ones") {
  const std::string dir = converted("stories260K", "1,2,3,5");
  const std::vector<std::vector<int32_t>> seqs = {{1, 7, 3, 9, 4, 200, 17}, {2, 5}, {11, 3, 8, 1, 6, 2, 7, 90, 91, 3}};
  auto scores = [&](const Layout& l) {
    std::vector<SequenceScores> out;
    std::mutex m;
    run_on_ranks(options(dir, l, 2), [&](RankContext& ctx) {
      auto got = score_sequences(*ctx.runner, seqs, 3);
      std::lock_guard<std::mutex> lock(m);
      if (ctx.is_output_rank()) out = std::move(got);
    });
    return out;
  };
  const auto ref = scores({});
  for (const Layout& l : {Layout{1, 2, 1}, Layout{2, 3, 1}}) {
    CAPTURE(text(l));
    const auto got = scores(l);
    REQUIRE(got.size() == ref.size());
    for (size_t s = 0; s < ref.size(); ++s) {
      REQUIRE(got[s].tokens.size() == ref[s].tokens.size());
      for (size_t i = 0; i < ref[s].tokens.size(); ++i) {
        CHECK(std::abs(got[s].tokens[i].logprob - ref[s].tokens[i].logprob) <= 1e-5);
        CHECK(got[s].tokens[i].top[0].first == ref[s].tokens[i].top[0].first);
      }
      CHECK(got[s].greedy == ref[s].greedy);
    }
  }
}

TEST_CASE("a batch job split over replicas writes the one-replica file, and resumes to it from any dp") {
  const std::string dir = converted("stories260K", "1,2,3,5");
  const fs::path work = fs::path(TPSHARD_TEST_OUT_DIR) / "dp_job";
  fs::remove_all(work);
  fs::create_directories(work);
  {
    std::ofstream in(work / "prompts.jsonl");
    for (int i = 0; i < 23; ++i)
      in << nlohmann::json{{"id", "p" + std::to_string(i)},
                           {"prompt", "Once upon a time " + std::string(static_cast<size_t>(i % 5) * 6, 'a')},
                           {"max_new_tokens", 6 + i % 7}}
                .dump()
         << "\n";
  }
  const std::string in = (work / "prompts.jsonl").string(), log = (work / "log.txt").string();
  auto job = [&](const std::string& layout, const std::string& out) {
    return run_tprun(dir + " --device cpu " + layout + " --max-batch 4 generate --input " + in + " --output " + out +
                         " --batch-size 4",
                     log);
  };
  const std::string one = (work / "one.jsonl").string();
  REQUIRE(job("--tp 1", one) == 0);
  const std::string full = read_file(one);
  REQUIRE(std::count(full.begin(), full.end(), '\n') == 23);
  for (const std::string layout : {"--tp 1 --dp 2", "--tp 2 --dp 3", "--tp 1 --pp 2 --dp 2"}) {
    CAPTURE(layout);
    const std::string out = (work / "dp.jsonl").string();
    fs::remove(out);
    REQUIRE(job(layout, out) == 0);
    CHECK(read_file(out) == full);
    CHECK(read_file(log).find("23 prompts (0 done before") != std::string::npos);
  }
  // An interrupted job: the first 9 lines of a dp 2 run and a torn tenth; resumed at dp 3 and at dp 1.
  for (const std::string resume : {"--tp 1 --dp 3", "--tp 1"}) {
    CAPTURE(resume);
    const std::string out = (work / "resumed.jsonl").string();
    std::string head;
    size_t at = 0;
    for (int i = 0; i < 9; ++i) at = full.find('\n', at) + 1;
    head = full.substr(0, at) + "{\"id\": \"p1";
    std::ofstream(out, std::ios::binary | std::ios::trunc) << head;
    REQUIRE(job(resume, out) == 0);
    CHECK(read_file(out) == full);
    CHECK(read_file(log).find("(9 done before") != std::string::npos);
  }
}

TEST_CASE("layouts that cannot run are refused before loading; a failing stage ends the whole job naming it") {
  const std::string dir = converted("tiny-llama", "1,2");
  // more stages than layers, a layout not converted
  CHECK_THROWS_WITH_AS(run_on_ranks(options(dir, {1, 3, 1}, 1), [](RankContext&) {}),
                       doctest::Contains("pp_size 3: the model has 2 layers"), Error);
  CHECK_THROWS_WITH_AS(run_on_ranks(options(dir, {4, 2, 1}, 1), [](RankContext&) {}),
                       doctest::Contains("no shards for pp_size 2 x tp_size 4"), Error);
  // --dp with a command that is not a batch job: a usage error (exit 2)
  const std::string log = std::string(TPSHARD_TEST_OUT_DIR) + "/dp_usage.txt";
  CHECK(WEXITSTATUS(run_tprun(dir + " --device cpu --dp 2 logits --ids 1,2", log)) == 2);
  CHECK(read_file(log).find("replicas split the items of a batch job") != std::string::npos);
  // stage 1's shard corrupted (a tensor's bytes): stage 0 has loaded and waits for stage 1; the job ends
  // with stage 1's error, not a hang
  const fs::path copy = fs::path(TPSHARD_TEST_OUT_DIR) / "pp_corrupt";
  fs::remove_all(copy);
  fs::copy(dir, copy, fs::copy_options::recursive);
  const fs::path stage1 = copy / "pp2-tp1/stage1-rank0.tps";
  uint64_t at = 0;
  {
    const ShardReader r(stage1.string());
    at = r.header().data_offset + r.tensors().front().file_offset + 4;  // inside the first tensor's bytes
  }
  {
    std::fstream f(stage1, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(static_cast<std::streamoff>(at));
    const char c = static_cast<char>(f.get());
    f.seekp(static_cast<std::streamoff>(at));
    f.put(static_cast<char>(c ^ 0x5a));
  }
  const auto t0 = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH_AS(run_on_ranks(options(copy.string(), {1, 2, 1}, 1),
                                    [](RankContext& ctx) {
                                      std::vector<float> logits(ctx.runner->config().vocab_size);
                                      ctx.runner->forward({{0, 0, {1, 2, 3}}}, logits.data(), nullptr);
                                    }),
                       doctest::Contains("stage1-rank0.tps"), Error);
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(20));
}
