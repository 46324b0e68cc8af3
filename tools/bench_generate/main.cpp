// bench_generate: time prefill and decode of the CUDA runner on a converted model, or check it end to
// end against committed references. One process, one thread per tp rank (GPU r); the communicator is the
// one make_device_comm picks (local at tp 1, peer on one NVLink host), or NCCL with --comm nccl (or
// TPSHARD_COMM=nccl).
//   bench_generate MODEL --tp 2 --batch 48 --prompt-len 128 --new-tokens 128        -> one JSON line
//   bench_generate MODEL --check-reference tests/fixtures/tiny-llama/reference.json  -> PASS/FAIL lines
//   bench_generate MODEL --check-greedy tests/fixtures/stories260K/expected_greedy200_ids.txt
//   bench_generate MODEL --check-lookahead  -> PASS/FAIL lines (decode lookahead on == off, check_lookahead.h)
//   bench_generate MODEL --check-shared-prefix [--atol A]  -> PASS/FAIL lines (check_shared_prefix.h)
// Options: --no-graphs (eager decode), --no-copy-bw (skip the 2 GiB copy-bandwidth probe), --no-greedy (logits only), --atol/--rtol (last_logits tolerance:
// |gpu - ref| <= atol + rtol * max|ref| for every logit of a prompt), --max-seq-len, --max-step-tokens
// (a small value makes the runner split prompts across several GPU steps), --comm auto|nccl.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <memory>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "format/error.h"
#include "model/manifest.h"
#include "format/shard_file.h"
#include "runtime/cuda/cuda_runner.h"
#include "runtime/cuda/make_device_comm.h"
#include "runtime/cuda/weight_arena.h"
#include "runtime/host_exchange.h"
#include "runtime/tuning.h"
#include "tools/bench_generate/check_lookahead.h"
#include "tools/bench_generate/check_shared_prefix.h"
#include "tools/copy_bandwidth.h"

using namespace tpshard;
using Clock = std::chrono::steady_clock;

namespace {

struct Args {
  std::string model;
  int tp = 1;
  int batch = 1, prompt_len = 32, new_tokens = 128;
  int max_seq_len = 0;
  int max_step_tokens = 0;  ///< 0: the runner's default
  bool graphs = true;
  bool copy_bw = true;  ///< measure the device-to-device copy bandwidth first (2 GiB for a moment on GPU 0)
  bool greedy = true;  ///< --check-reference also compares greedy tokens (off for reduced-precision copies)
  std::string check_reference, check_greedy;
  bool force_nccl = false;       ///< --comm nccl (or TPSHARD_COMM=nccl): NCCL on every rank thread
  bool check_lookahead = false;  ///< --check-lookahead: the decode lookahead changes no result (check_lookahead.h)
  bool check_shared_prefix = false;  ///< --check-shared-prefix: a prefix read from another slot (check_shared_prefix.h)
  double atol = 1e-3, rtol = 1e-3;  ///< last_logits: |gpu - ref| <= atol + rtol * max|ref| per prompt
};

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

/// Everything rank r does; rank 0 prints. Returns non-zero when a check failed.
int run_rank(const Args& a, const Manifest& m, const std::shared_ptr<ThreadExchangeGroup>& group, int rank,
             std::mutex& print_mu) {
  if (cudaSetDevice(rank) != cudaSuccess) throw Error("bench_generate: no GPU " + std::to_string(rank), "use --tp <= GPUs");
  const double copy_gbps =
      rank == 0 && a.copy_bw && a.check_reference.empty() && a.check_greedy.empty() ? device_copy_gbps() : 0;
  // device memory in use (this GPU, all processes) after each stage: the deltas are this process's
  auto used_mib = [] {
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    return static_cast<double>(total_b - free_b) / 1048576.0;
  };
  nlohmann::json mem;
  mem["after_context"] = used_mib();
  const ManifestShard& sh = shards_for(m, a.tp, a.model)[rank];
  ShardReader reader(a.model + "/" + sh.file);
  cuda::LoadReport rep;
  cuda::WeightArena arena(reader, cuda::LoadOptions{}, &rep);
  mem["after_weights"] = used_mib();
  ThreadExchange exchange(group, rank);
  cuda::DeviceCommOptions co;
  co.force_nccl = a.force_nccl || tuning().force_nccl;
  co.custom_all_reduce = tuning().custom_all_reduce;
  const std::unique_ptr<cuda::DeviceCommunicator> comm_owner = cuda::make_device_comm(exchange, co);
  cuda::DeviceCommunicator& comm = *comm_owner;
  comm.barrier();  // NCCL allocates its buffers at the first collective
  mem["after_comm"] = used_mib();
  cuda::CudaRunnerOptions o;
  o.use_cuda_graphs = a.graphs && tuning().cuda_graphs;
  o.lookahead = tuning().lookahead;
  o.pdl = tuning().pdl;
  o.cascade_attention = tuning().cascade_attention;
  if (a.max_step_tokens > 0) o.max_step_tokens = a.max_step_tokens;
  int fails = 0;
  auto say = [&](const std::string& s) {
    if (rank != 0) return;
    std::lock_guard<std::mutex> g(print_mu);
    std::printf("%s\n", s.c_str());
    std::fflush(stdout);
  };

  if (a.check_lookahead) return check_lookahead(m, rank, a.tp, arena, comm, say);
  if (a.check_shared_prefix) return check_shared_prefix(m, rank, a.tp, arena, comm, o, a.atol, say);

  if (!a.check_reference.empty()) {
    std::ifstream f(a.check_reference);
    const nlohmann::json ref = nlohmann::json::parse(f);
    const auto prompts = ref.at("prompts").get<std::vector<std::vector<int32_t>>>();
    const auto last = ref.at("last_logits").get<std::vector<std::vector<double>>>();
    const auto greedy = ref.at("greedy").get<std::vector<std::vector<int32_t>>>();
    const int n = static_cast<int>(prompts.size());
    o.max_batch = n;
    int need = 128;  // default: the longest prompt and its greedy continuation, at least 128 positions
    for (int i = 0; i < n && i < static_cast<int>(greedy.size()); ++i)
      need = std::max(need, static_cast<int>(prompts[i].size() + greedy[i].size()));
    o.max_seq_len = a.max_seq_len > 0 ? a.max_seq_len : need;
    auto runner = cuda::make_cuda_runner(m, rank, a.tp, arena, comm, o);
    const int64_t vocab = m.model.vocab_size;
    std::vector<SeqChunk> chunks(n);
    for (int i = 0; i < n; ++i) chunks[i] = {i, 0, prompts[i]};
    std::vector<float> logits(static_cast<size_t>(n) * vocab);
    std::vector<int32_t> next(n);
    runner->forward(chunks, logits.data(), next.data());  // all prompts packed in one prefill step
    for (int i = 0; i < n; ++i) {
      double max_ref = 0, max_err = 0;
      for (int64_t v = 0; v < vocab; ++v) {
        max_ref = std::max(max_ref, std::fabs(last[i][v]));
        max_err = std::max(max_err, std::fabs(logits[i * vocab + v] - last[i][v]));
      }
      const bool ok = max_err <= a.atol + a.rtol * max_ref;
      fails += !ok;
      say(std::string(ok ? "PASS" : "FAIL") + " last_logits prompt " + std::to_string(i) + ": max abs err " +
          std::to_string(max_err) + " (max |ref| " + std::to_string(max_ref) + ")");
    }
    // greedy: batched decode of all prompts (CUDA graph bucket), compared token by token
    std::vector<std::vector<int32_t>> got(n);
    for (int i = 0; i < n; ++i) got[i].push_back(next[i]);
    const size_t steps = a.greedy ? greedy[0].size() : 0;
    for (size_t s = 1; s < steps; ++s) {
      for (int i = 0; i < n; ++i)
        chunks[i] = {i, static_cast<int>(prompts[i].size() + s - 1), {got[i].back()}, s + 1 == steps};
      runner->forward(chunks, nullptr, next.data());
      for (int i = 0; i < n; ++i) got[i].push_back(next[i]);
    }
    for (int i = 0; i < n && a.greedy; ++i) {
      const bool ok = got[i] == greedy[i];
      fails += !ok;
      std::string s;
      for (int32_t t : got[i]) s += std::to_string(t) + " ";
      say(std::string(ok ? "PASS" : "FAIL") + " greedy prompt " + std::to_string(i) + ": " + s);
    }
    return fails;
  }

  if (!a.check_greedy.empty()) {
    // whitespace- or JSON-list-separated ids ("[1, 403, ...]" or "1 403 ...")
    std::ifstream f(a.check_greedy);
    std::string text{std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
    for (char& ch : text)
      if (!std::isdigit(static_cast<unsigned char>(ch))) ch = ' ';
    std::istringstream in(text);
    std::vector<int32_t> expect{std::istream_iterator<int32_t>(in), std::istream_iterator<int32_t>()};
    TPS_CHECK(expect.size() >= 2, "bench_generate: " + a.check_greedy + " holds fewer than 2 ids", "pass the ids file");
    o.max_batch = 1;
    o.max_seq_len = static_cast<int>(expect.size()) + 1;
    auto runner = cuda::make_cuda_runner(m, rank, a.tp, arena, comm, o);
    std::vector<int32_t> got = {expect[0]};  // BOS
    int32_t next = 0;
    for (size_t s = 0; s + 1 < expect.size(); ++s) {
      std::vector<SeqChunk> c = {{0, static_cast<int>(s), {got.back()}}};
      runner->forward(c, nullptr, &next);
      got.push_back(next);
    }
    size_t same = 0;
    while (same < got.size() && got[same] == expect[same]) ++same;
    const bool ok = same == expect.size();
    say(std::string(ok ? "PASS" : "FAIL") + " greedy ids: " + std::to_string(same) + " of " + std::to_string(expect.size()) +
        " identical (tp " + std::to_string(a.tp) + ")");
    return ok ? 0 : 1;
  }

  // benchmark
  o.max_batch = a.batch;
  o.max_seq_len = a.max_seq_len > 0 ? a.max_seq_len : a.prompt_len + a.new_tokens;
  auto runner = cuda::make_cuda_runner(m, rank, a.tp, arena, comm, o);
  mem["after_runner"] = used_mib();
  std::mt19937 rng(1234);
  std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(m.model.vocab_size - 1));
  std::vector<SeqChunk> prompts(a.batch);
  for (int i = 0; i < a.batch; ++i) {
    prompts[i].slot = i;
    for (int k = 0; k < a.prompt_len; ++k) prompts[i].tokens.push_back(tok(rng));
  }
  double prefill_s = 0, decode_s = 0;
  for (int round = 0; round < 2; ++round) {  // round 0 warms up (cuBLASLt plans, graph capture)
    std::vector<int32_t> next(a.batch);
    auto t0 = Clock::now();
    runner->forward(prompts, nullptr, next.data());
    prefill_s = seconds_since(t0);
    std::vector<SeqChunk> step(a.batch);
    t0 = Clock::now();
    for (int s = 1; s < a.new_tokens; ++s) {
      for (int i = 0; i < a.batch; ++i) step[i] = {i, a.prompt_len + s - 1, {next[i]}, s + 1 == a.new_tokens};
      runner->forward(step, nullptr, next.data());
    }
    decode_s = seconds_since(t0);
  }
  size_t free_b = 0, total_b = 0;
  cudaMemGetInfo(&free_b, &total_b);
  const int steps = std::max(1, a.new_tokens - 1);
  nlohmann::json j;
  j["tp"] = a.tp;
  j["dtype"] = dtype_name(m.dtype);
  j["batch"] = a.batch;
  j["prompt_len"] = a.prompt_len;
  j["new_tokens"] = a.new_tokens;
  j["prefill_tok_s"] = a.batch * a.prompt_len / prefill_s;
  j["decode_tok_s"] = a.batch * steps / decode_s;
  j["ms_per_step"] = 1e3 * decode_s / steps;
  const cuda::LookaheadStats la = cuda::lookahead_stats(*runner);  // both rounds
  j["lookahead_steps"] = la.ahead_used;
  j["decode_calls"] = la.decode_steps;
  j["weight_bytes_per_rank"] = rep.arena_bytes;
  j["effective_gbps"] = rep.arena_bytes * (steps / decode_s) / 1e9;
  j["copy_gbps"] = copy_gbps;
  j["peak_mem_gib"] = (total_b - free_b) / double(1ull << 30);
  j["kv_cache_bytes"] = runner->kv_cache_bytes();
  mem["end"] = (total_b - free_b) / 1048576.0;
  j["mem_mib_gpu0"] = mem;
  j["graphs"] = a.graphs;
  j["comm"] = comm.name();
  say(j.dump());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    auto val = [&]() -> std::string {
      if (i + 1 >= argc) throw Error("bench_generate: " + k + " needs a value", "see the usage in main.cpp");
      return argv[++i];
    };
    if (k == "--tp") a.tp = std::stoi(val());
    else if (k == "--batch") a.batch = std::stoi(val());
    else if (k == "--prompt-len") a.prompt_len = std::stoi(val());
    else if (k == "--new-tokens") a.new_tokens = std::stoi(val());
    else if (k == "--max-seq-len") a.max_seq_len = std::stoi(val());
    else if (k == "--no-graphs") a.graphs = false;
    else if (k == "--no-copy-bw") a.copy_bw = false;
    else if (k == "--no-greedy") a.greedy = false;
    else if (k == "--max-step-tokens") a.max_step_tokens = std::stoi(val());
    else if (k == "--check-reference") a.check_reference = val();
    else if (k == "--check-greedy") a.check_greedy = val();
    else if (k == "--check-lookahead") a.check_lookahead = true;
    else if (k == "--check-shared-prefix") a.check_shared_prefix = true;
    else if (k == "--atol") a.atol = std::stod(val());
    else if (k == "--rtol") a.rtol = std::stod(val());
    else if (k == "--comm") {
      const std::string c = val();
      if (c != "auto" && c != "nccl") {
        std::fprintf(stderr, "error: --comm %s: expected auto or nccl\n", c.c_str());
        return 2;
      }
      a.force_nccl = c == "nccl";
    }
    else if (a.model.empty()) a.model = k;
    else {
      std::fprintf(stderr, "error: unknown argument %s\n", k.c_str());
      return 2;
    }
  }
  if (a.model.empty()) {
    std::fprintf(stderr, "usage: bench_generate MODEL [--tp N] [--batch B --prompt-len P --new-tokens N] "
                         "[--check-reference FILE] [--check-greedy FILE] [--no-graphs] [--comm auto|nccl]\n");
    return 2;
  }
  try {
    const Manifest m = load_manifest(a.model);
    auto group = std::make_shared<ThreadExchangeGroup>(a.tp);
    std::vector<int> rc(a.tp, 0);
    std::vector<std::string> err(a.tp);
    std::mutex mu;
    std::vector<std::thread> threads;
    for (int r = 0; r < a.tp; ++r)
      threads.emplace_back([&, r] {
        try {
          rc[r] = run_rank(a, m, group, r, mu);
        } catch (const Error& e) {
          err[r] = std::string(e.what()) + (e.hint().empty() ? "" : "\nhint: " + e.hint());
          rc[r] = 1;
        } catch (const std::exception& e) {
          err[r] = e.what();
          rc[r] = 1;
        }
        if (rc[r] != 0 && !err[r].empty()) group->abort("rank " + std::to_string(r) + " failed");  // wake waiters
      });
    for (auto& t : threads) t.join();
    int worst = 0;
    for (int r = 0; r < a.tp; ++r) {
      if (!err[r].empty()) std::fprintf(stderr, "error: rank %d: %s\n", r, err[r].c_str());
      worst = std::max(worst, rc[r]);
    }
    return worst ? 1 : 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "error: %s\nhint: %s\n", e.what(), e.hint().c_str());
    return 1;
  }
}
