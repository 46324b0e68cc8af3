// test_cli.cpp: the tpshard binary end to end: exit codes and messages of convert / inspect /
// verify (a flipped byte names the tensor and file) / plan, usage errors exiting 2 (as tprun), a convert
// stopped by SIGINT exiting 130 with nothing left (also while hashing, within one chunk; a second signal
// takes the default action); and plan_memory against hand-computed numbers.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "convert/convert.h"
#include "convert/fs_util.h"
#include "convert/temp_owner.h"
#include "format/error.h"
#include "model/manifest.h"
#include "model/memory_plan.h"
#include "model/model_config.h"
#include "format/shard_file.h"
#include "tiny_checkpoint.h"

using namespace tpshard;
using namespace tpshard::test;
namespace fs = std::filesystem;

TEST_CASE("tpshard convert / inspect / verify / plan: exit codes and messages") {
  ScratchDir d;
  LlamaSpec s;  // 2 layers, 8 heads, 2 KV heads, head_dim 4, hidden 16, inter 24, vocab 37, bf16
  make_llama(s).save(d / "hf");
  const std::string log = d / "log.txt";
  REQUIRE(run_tpshard("convert " + (d / "hf") + " -o " + (d / "out") + " --tp 1,2,4 --threads 2", log) == 0);
  const std::string summary = read_text(log);
  CHECK(summary.find("tp4/rank3.tps") != std::string::npos);
  CHECK(summary.find("tpshard convert:") != std::string::npos);
  // Existing OUT without --force: exit 1 with error and hint lines.
  CHECK(run_tpshard("convert " + (d / "hf") + " -o " + (d / "out"), log) == 1);
  CHECK(read_text(log).find("error: " + (d / "out") + ": already exists\nhint: pass --force") != std::string::npos);
  // More ranks than heads: exit 1, nothing left.
  CHECK(run_tpshard("convert " + (d / "hf") + " -o " + (d / "out3") + " --tp 9", log) == 1);
  CHECK(read_text(log).find("tp_size 9 is larger than num_attention_heads 8") != std::string::npos);
  CHECK_FALSE(fs::exists(d / "out3"));
  // Usage errors: 2, as in tprun (more in "every usage error exits 2").
  CHECK(run_tpshard("convert " + (d / "hf"), log) == 2);
  CHECK(run_tpshard("convert " + (d / "hf") + " -o " + (d / "o") + " --compress lz4", log) == 2);
  CHECK(read_text(log) == "error: --compress lz4: unknown codec\n"
                          "hint: use none, zstd[:level] or zstd-planes[:level] (level 1..19)\n");
  CHECK(run_tpshard("convert " + (d / "hf") + " -o " + (d / "o") + " --dtype int8", log) == 2);

  CHECK(run_tpshard("inspect " + (d / "out") + " --tp 2 --tensors --rank 1", log) == 0);
  CHECK(read_text(log).find("blk.1.ffn_gate_up.weight") != std::string::npos);
  // A tp size or rank the model does not have: the error alone, no half report before it.
  CHECK(run_tpshard("inspect " + (d / "out") + " --tp 8", log) == 1);
  CHECK(read_text(log) == "error: " + (d / "out/manifest.json") + ": no shards for tp_size 8 (it has tp 1, 2, 4)\n"
                          "hint: run with one of those tp sizes, or add it: `tpshard convert HF_DIR -o " + (d / "out") +
                          " --add-tp 8` (the layouts there, and results of resumable jobs, stay valid)\n");
  CHECK(run_tpshard("inspect " + (d / "out") + " --tp 2 --tensors --rank 2", log) == 1);
  CHECK(read_text(log) == "error: inspect --rank 2: tp_size 2 has tp_rank 0..1\nhint: pass --rank 0..1\n");
  CHECK(run_tpshard("inspect " + (d / "out") + " --tensors --rank 1", log) == 1);  // tp 1 has rank 0 only
  CHECK(read_text(log).rfind("error: inspect --rank 1: tp_size 1 has tp_rank 0..0\n", 0) == 0);
  CHECK(run_tpshard("inspect " + (d / "out") + " --tp 2 --rank 1", log) == 2);  // --rank only picks a --tensors table
  CHECK(read_text(log).find("--rank requires --tensors") != std::string::npos);

  CHECK(run_tpshard("verify " + (d / "out"), log) == 0);
  CHECK(read_text(log).find("verified 7 shard file(s)") != std::string::npos);
  // Flip one byte inside blk.1.attn_output.weight of tp2/rank1: verify names tensor and file.
  const std::string shard = d / "out/tp2/rank1.tps";
  uint64_t off;
  {
    const ShardReader r(shard);
    off = r.header().data_offset + r.at("blk.1.attn_output.weight").file_offset + 3;
  }
  {
    std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(static_cast<std::streamoff>(off));
    char c;
    f.get(c);
    f.seekp(static_cast<std::streamoff>(off));
    f.put(static_cast<char>(c ^ 0x40));
  }
  CHECK(run_tpshard("verify " + (d / "out"), log) == 1);
  const std::string v = read_text(log);
  CHECK(v.find("BAD " + shard + ": tensor blk.1.attn_output.weight: XXH3") != std::string::npos);
  CHECK(v.find("error: 1 of ") != std::string::npos);  // every file is checked, the bad one is counted
  // stdout's "ok" lines and stderr's "BAD" line and error keep their order in one file
  CHECK(v.find("ok  tp2/rank0.tps") < v.find("BAD "));
  CHECK(v.find("BAD ") < v.find("error: 1 of "));
  CHECK(v.rfind("ok  ") < v.find("error: 1 of "));
  CHECK(v.find("first: " + shard + ": tensor blk.1.attn_output.weight") != std::string::npos);
  CHECK(run_tpshard("verify " + (d / "out") + " --tp 4", log) == 0);  // other tp sizes are intact

  // kv_cache = 2 * 2 layers * (3 batch + 1 scratch) * 10 seq * 1 kv head per rank * 4 head_dim * 2 bytes = 1280 B
  CHECK(run_tpshard("plan " + (d / "out") + " --tp 2 --batch 3 --max-seq 10", log) == 0);
  CHECK(read_text(log).find(" 1.25 KiB  (2 * stage layers") != std::string::npos);
  CHECK(run_tpshard("plan " + (d / "out") + " --tp 2 --batch 3 --max-seq 10 --gpu-mem 0.01", log) == 1);
  CHECK(read_text(log).find("does not fit") != std::string::npos);
  CHECK(run_tpshard("plan " + (d / "out") + " --tp 2 --batch 3 --max-seq 10 --gpu-mem -1", log) == 2);
  CHECK(read_text(log).find("must be > 0") != std::string::npos);
  CHECK(run_tpshard("plan " + (d / "out") + " --tp 2 --batch 3 --max-seq 100000", log) == 1);
  CHECK(read_text(log).find("max_position_embeddings") != std::string::npos);
  CHECK(run_tpshard("verify " + (d / "nothing"), log) == 1);
  CHECK(read_text(log) == "error: " + (d / "nothing") + ": no such directory\n"
                          "hint: point at a directory written by `tpshard convert` (it holds manifest.json)\n");
  // a Hugging Face repo id given where a converted model belongs: convert it first
  CHECK(run_tpshard("verify HuggingFaceTB/SmolLM2-135M-Instruct", log) == 1);
  CHECK(read_text(log) == "error: HuggingFaceTB/SmolLM2-135M-Instruct: no such directory\n"
                          "hint: this needs a converted model; a Hugging Face repo id is converted first: `tpshard "
                          "convert HuggingFaceTB/SmolLM2-135M-Instruct -o OUT --tp N`, then run OUT\n");
  // A missing checkpoint directory is an error (exit 1) like verify's, not a usage error; a file or a
  // directory without config.json are named too; nothing is written.
  CHECK(run_tpshard("convert " + (d / "nothing") + " -o " + (d / "o"), log) == 1);
  CHECK(read_text(log) == "error: " + (d / "nothing") + ": cannot open (No such file or directory)\n"
                          "hint: give the Hugging Face model directory (it holds config.json and *.safetensors)\n");
  CHECK(run_tpshard("convert " + (d / "log.txt") + " -o " + (d / "o"), log) == 1);
  CHECK(read_text(log).rfind("error: " + (d / "log.txt") + ": not a directory\n", 0) == 0);
  fs::create_directories(d / "empty");
  CHECK(run_tpshard("convert " + (d / "empty") + " -o " + (d / "o"), log) == 1);
  CHECK(read_text(log).find("config.json: cannot open (No such file or directory)") != std::string::npos);
  CHECK_FALSE(fs::exists(d / "o"));
  CHECK(run_tpshard("convert " + (d / "hf") + " -o ''", log) == 1);
  CHECK(read_text(log) == "error: convert --out: empty path\nhint: give the directory to write, e.g. -o models/NAME\n");
  // MODEL/manifest.json given for MODEL: the directory is suggested
  CHECK(run_tpshard("verify " + (d / "out/manifest.json"), log) == 1);
  CHECK(read_text(log) == "error: " + (d / "out/manifest.json") + ": is a file, not a model directory\n"
                          "hint: pass the model directory that holds manifest.json: " + (d / "out") + "\n");
  // a shard file, or the tpN folder that holds it: the model directory above is named
  std::string a_shard;
  for (const auto& e : fs::recursive_directory_iterator(d / "out"))
    if (e.path().extension() == ".tps") a_shard = e.path().string();
  REQUIRE_FALSE(a_shard.empty());
  CHECK(run_tpshard("verify " + a_shard, log) == 1);
  CHECK(read_text(log).find("hint: pass the model directory that holds manifest.json: " + (d / "out") + "\n") != std::string::npos);
  const std::string tp_dir = fs::path(a_shard).parent_path().string();
  CHECK(run_tpshard("verify " + tp_dir, log) == 1);
  CHECK(read_text(log).find("hint: pass the model directory that holds manifest.json: " + (d / "out") + "\n") != std::string::npos);
}

TEST_CASE("a model directory that is a checkpoint not converted yet (Hugging Face, llama2.c): the hint says how to convert") {
  ScratchDir d;
  LlamaSpec s;
  make_llama(s).save(d / "hf");
  const std::string log = d / "log.txt";
  CHECK(run_tpshard("inspect " + (d / "hf"), log) == 1);
  CHECK(read_text(log) == "error: " + (d / "hf/manifest.json") + ": cannot open (No such file or directory)\nhint: " +
                              (d / "hf") + " is a Hugging Face checkpoint, not converted yet: `tpshard convert " +
                              (d / "hf") + " -o OUT --tp N`, then run OUT\n");
  fs::create_directories(d / "l2c");
  std::ofstream(d / "l2c/stories260K.bin") << "x";
  std::ofstream(d / "l2c/tok512.bin") << "x";
  CHECK(run_tpshard("verify " + (d / "l2c"), log) == 1);
  CHECK(read_text(log).find("hint: this looks like a llama2.c checkpoint: import it first with `python3 "
                            "scripts/llama2c_to_hf.py " + (d / "l2c") + " HF_OUT`") != std::string::npos);
  fs::create_directories(d / "empty");
  CHECK(run_tpshard("inspect " + (d / "empty"), log) == 1);
  CHECK(read_text(log).find("hint: point at a directory written by `tpshard convert` (it holds manifest.json)\n") !=
        std::string::npos);
}

TEST_CASE("tpshard convert of a directory without config.json says what it holds instead") {
  ScratchDir d;
  const std::string log = d / "log.txt";
  fs::create_directories(d / "l2c");
  std::ofstream(d / "l2c/stories260K.bin") << "x";
  std::ofstream(d / "l2c/stories260K.tok512.bin") << "x";
  CHECK(run_tpshard("convert " + (d / "l2c") + " -o " + (d / "o1"), log) == 1);
  CHECK(read_text(log).find("hint: this looks like a llama2.c checkpoint: import it first with `python3 scripts/llama2c_to_hf.py") !=
        std::string::npos);
  fs::create_directories(d / "gg");
  std::ofstream(d / "gg/model-q4.gguf") << "x";
  CHECK(run_tpshard("convert " + (d / "gg") + " -o " + (d / "o2"), log) == 1);
  CHECK(read_text(log).find("GGUF files are not a source tpshard converts") != std::string::npos);
  fs::create_directories(d / "empty");
  CHECK(run_tpshard("convert " + (d / "empty") + " -o " + (d / "o3"), log) == 1);
  CHECK(read_text(log).find("Hugging Face model directory (config.json and *.safetensors)") != std::string::npos);
  CHECK_FALSE(fs::exists(d / "o1"));
}

TEST_CASE("tpshard: an unknown or missing subcommand is named with the choices") {
  ScratchDir d;
  const std::string log = d / "log.txt";
  const std::string hint = "hint: choose one of: convert, inspect, verify, plan (`tpshard --help` describes each)\n";
  CHECK(run_tpshard("frobnicate --tp 2", log) == 2);
  CHECK(read_text(log) == "error: tpshard: unknown subcommand 'frobnicate'\n" + hint);
  CHECK(run_tpshard("", log) == 2);
  CHECK(read_text(log) == "error: tpshard: no subcommand given\n" + hint);
  CHECK(run_tpshard("inspect", log) == 2);  // a missing required argument keeps CLI11's message
  CHECK(read_text(log).find("MODEL_DIR is required") != std::string::npos);
}

TEST_CASE("tpshard refuses odd numeric options with the valid range, writing nothing") {
  ScratchDir d;
  LlamaSpec s;
  make_llama(s).save(d / "hf");
  const std::string log = d / "log.txt";
  const std::string convert = "convert " + (d / "hf") + " -o " + (d / "out");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {convert + " --tp 0", "--tp: must be > 0, got 0"},
      {convert + " --tp 1,-2", "--tp: must be > 0, got -2"},
      {convert + " --tp 1,2048", "--tp: must be at most 1024 (the largest tp_size), got 2048"},
      {convert + " --tp 999999999999", "--tp: must be at most 1024 (the largest tp_size), got 999999999999"},
      {convert + " --threads 1000", "--threads: must be an integer in 0..256 (0 = min(cores, 8)), got 1000"},
      {convert + " --threads -1", "--threads: must be an integer in 0..256 (0 = min(cores, 8)), got -1"},
      {"inspect " + (d / "hf") + " --tp 0", "--tp: must be > 0, got 0"},
      {"inspect " + (d / "hf") + " --tensors --rank -1", "--rank: must be >= 0, got -1"},
      {"verify " + (d / "hf") + " --tp -2", "--tp: must be > 0, got -2"},
      {"plan " + (d / "hf") + " --tp 0 --batch 1 --max-seq 8", "--tp: must be > 0, got 0"},
      {"plan " + (d / "hf") + " --tp 1 --batch 1 --max-seq 8 --gpu-mem inf",
       "--gpu-mem: must be a finite number, got inf"},
      {"plan " + (d / "hf") + " --tp 1 --batch 2.5 --max-seq 8", "--batch: must be an integer, got 2.5"},
      {"plan " + (d / "hf") + " --tp 1 --batch 1 --max-seq 99999999999999999999",
       "--max-seq: must be at most 9223372036854775807, got 99999999999999999999"},
      {"plan " + (d / "hf") + " --tp 1 --batch 1 --max-seq 8 --gpu-mem 1.5x", "--gpu-mem: '1.5x' is not a number"},
  };
  for (const auto& [args, message] : cases) {
    CAPTURE(args);
    CHECK(run_tpshard(args, log) == 2);
    CHECK(read_text(log).rfind("error: " + message + "\n", 0) == 0);
  }
  CHECK_FALSE(fs::exists(d / "out"));
}

TEST_CASE("tpshard: every usage error exits 2 (not CLI11's 104-109), keeping its message; --help, --version 0") {
  ScratchDir d;
  fs::create_directories(d / "hf");
  const std::string log = d / "log.txt";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"inspect " + (d / "m") + " --tp 1.5", "--tp: must be an integer, got 1.5"},      // before CLI11's conversion
      {"inspect " + (d / "m") + " --tp 0", "--tp: must be > 0, got 0"},                   // ValidationError
      {"convert " + (d / "hf"), "--out is required"},                                    // RequiredError
      {"inspect " + (d / "m") + " --rank 1", "--rank requires --tensors"},                // RequiresError
      {"inspect " + (d / "m") + " extra", "The following argument was not expected: extra"},  // ExtrasError
      {"convert " + (d / "hf") + " -o " + (d / "out") + " --compress zstd:99", "error: --compress zstd:99: level"},
  };
  for (const auto& [args, message] : cases) {
    CAPTURE(args);
    CHECK(run_tpshard(args, log) == 2);
    CHECK_MESSAGE(read_text(log).find(message) != std::string::npos, read_text(log));
  }
  CHECK_FALSE(fs::exists(d / "out"));
  CHECK(run_tpshard("--help", log) == 0);
  CHECK(read_text(log).find("convert") != std::string::npos);
  CHECK(run_tpshard("convert --help", log) == 0);
  CHECK(read_text(log).find("--compress") != std::string::npos);
  CHECK(run_tpshard("--version", log) == 0);
  CHECK(read_text(log).rfind(std::string(tool_version()) + " (commit ", 0) == 0);  // "0.1.0 (commit 0123456789ab)"
}

namespace {
/// Whether process `pid` has a handler installed for `sig` (the SigCgt mask of /proc/PID/status).
bool catches_signal(pid_t pid, int sig) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(f, line);)
    if (line.rfind("SigCgt:", 0) == 0) return ((std::stoull(line.substr(7), nullptr, 16) >> (sig - 1)) & 1) != 0;
  return false;
}

}  // namespace

TEST_CASE("tpshard convert stopped by SIGINT exits 130, as tprun, and leaves no output") {
  ScratchDir d;
  LlamaSpec s;  // ~23 MB of f32 written 4 times (tp 1, 2, 4, 8): runs long after its SIGINT handler is set
  s.heads = 8, s.kv_heads = 8, s.head_dim = 32, s.hidden = 256, s.inter = 768, s.vocab = 4096, s.layers = 4;
  s.dtype = DType::F32;
  make_llama(s).save(d / "hf");
  const std::string out = d / "out", log = d / "log.txt";
  const std::string bin = TPSHARD_BIN, hf = d / "hf";
  const pid_t pid = spawn_logged(bin, {"convert", hf, "-o", out, "--tp", "1,2,4,8", "--threads", "1"}, log);
  // Freeze it once its TempDirGuard is alive (handler set, OUT.tmp-* holding the owner record), then
  // deliver SIGINT: it must stop at the next chunk, remove OUT.tmp-* and exit 128 + 2.
  bool stopped_inside = false;
  for (int i = 0; i < 20000 && !stopped_inside; ++i) {
    if (catches_signal(pid, SIGINT)) {
      REQUIRE(::kill(pid, SIGSTOP) == 0);
      int st = 0;
      REQUIRE(::waitpid(pid, &st, WUNTRACED) == pid);
      REQUIRE(WIFSTOPPED(st));
      const std::vector<std::string> tmp = siblings_of(out, ".tmp-");
      stopped_inside = catches_signal(pid, SIGINT) && tmp.size() == 1 && fs::exists(tmp[0] + "/" + kTempOwnerFile);
      if (!stopped_inside) REQUIRE(::kill(pid, SIGCONT) == 0);
    }
    if (!stopped_inside) std::this_thread::sleep_for(std::chrono::microseconds(500));
  }
  REQUIRE_MESSAGE(stopped_inside, "the convert was not caught while converting: " << read_text(log));
  REQUIRE(::kill(pid, SIGINT) == 0);
  REQUIRE(::kill(pid, SIGCONT) == 0);
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  INFO("output: " << read_text(log));
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 130);
  CHECK(read_text(log).find("error: interrupted (SIGINT/SIGTERM): conversion stopped, nothing was written\n") !=
        std::string::npos);
  CHECK_FALSE(fs::exists(out));
  CHECK(siblings_of(out, ".tmp-").empty());
}

namespace {
/// How many of process `pid`'s open file descriptors name `path` (/proc/PID/fd).
int open_fds_of(pid_t pid, const std::string& path) {
  int n = 0;
  std::error_code ec;
  for (fs::directory_iterator it("/proc/" + std::to_string(pid) + "/fd", ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code lec;
    if (fs::read_symlink(it->path(), lec) == fs::path(path)) ++n;
  }
  return n;
}
}  // namespace

TEST_CASE("tpshard convert stopped by SIGINT while hashing the source stops within a chunk, exit 130, no output") {
  // model.safetensors = a tiny Llama plus an unused 8 GiB tensor left sparse (no disk used): hashing it
  // takes seconds even at 8 GB/s, converting the rest milliseconds.
  ScratchDir d;
  const TinyModel tiny = make_llama(LlamaSpec{});
  const std::string hf = d / "hf", src = hf + "/model.safetensors";
  tiny.save(hf);
  {
    nlohmann::json h = nlohmann::json::object();
    uint64_t off = 0;
    for (const auto& [name, e] : tiny.st) {
      h[name] = {{"dtype", e.dtype}, {"shape", e.shape}, {"data_offsets", {off, off + e.bytes.size()}}};
      off += e.bytes.size();
    }
    const uint64_t extra = 8ull << 30;
    h["unused.sparse"] = {{"dtype", "F32"}, {"shape", {extra / 4}}, {"data_offsets", {off, off + extra}}};
    std::string hs = h.dump();
    while (hs.size() % 8) hs += ' ';
    {
      std::ofstream f(src, std::ios::binary | std::ios::trunc);
      const uint64_t n = hs.size();
      f.write(reinterpret_cast<const char*>(&n), 8);
      f.write(hs.data(), static_cast<std::streamsize>(hs.size()));
      for (const auto& [name, e] : tiny.st)
        f.write(reinterpret_cast<const char*>(e.bytes.data()), static_cast<std::streamsize>(e.bytes.size()));
    }
    REQUIRE(::truncate(src.c_str(), static_cast<off_t>(8 + hs.size() + off + extra)) == 0);
  }
  const std::string out = d / "out", log = d / "log.txt", bin = TPSHARD_BIN;
  const pid_t pid = spawn_logged(bin, {"convert", hf, "-o", out, "--tp", "1", "--threads", "1", "--allow-unused"}, log);
  // Hashing the source: a second descriptor of model.safetensors is open (the first is the mapping's).
  // Freeze it there, then SIGINT: it must exit within one 8 MiB chunk, not after the rest of 8 GiB.
  bool stopped_hashing = false;
  for (int i = 0; i < 20000 && !stopped_hashing; ++i) {
    if (open_fds_of(pid, src) >= 2) {
      REQUIRE(::kill(pid, SIGSTOP) == 0);
      int st = 0;
      REQUIRE(::waitpid(pid, &st, WUNTRACED) == pid);
      REQUIRE(WIFSTOPPED(st));
      stopped_hashing = open_fds_of(pid, src) >= 2 && catches_signal(pid, SIGINT);
      if (!stopped_hashing) REQUIRE(::kill(pid, SIGCONT) == 0);
    }
    if (!stopped_hashing) std::this_thread::sleep_for(std::chrono::microseconds(250));
  }
  if (!stopped_hashing) ::kill(pid, SIGKILL);
  REQUIRE_MESSAGE(stopped_hashing, "the convert was not caught while hashing: " << read_text(log));
  const auto t0 = std::chrono::steady_clock::now();
  REQUIRE(::kill(pid, SIGINT) == 0);
  REQUIRE(::kill(pid, SIGCONT) == 0);
  int status = 0;
  double seconds = 0;
  for (;;) {  // bounded: a convert that ignores the signal is killed after 3 s and the test fails
    const pid_t w = ::waitpid(pid, &status, WNOHANG);
    REQUIRE(w >= 0);
    seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (w == pid) break;
    if (seconds > 3) {
      ::kill(pid, SIGKILL);
      REQUIRE(::waitpid(pid, &status, 0) == pid);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  INFO("output: " << read_text(log));
  CHECK_MESSAGE(seconds < 0.5, "SIGINT took " << seconds << " s to stop the hashing");
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 130);
  const std::string text = read_text(log);
  CHECK(text.find("press Ctrl-C again to stop at once") != std::string::npos);
  CHECK(text.find("error: interrupted (SIGINT/SIGTERM): conversion stopped, nothing was written\n") != std::string::npos);
  CHECK_FALSE(fs::exists(out));
  CHECK(siblings_of(out, ".tmp-").empty());
}

TEST_CASE("the first SIGINT/SIGTERM of a convert is kept; it restores the default action, so a second one ends it") {
  ScratchDir d;
  auto default_action = [](int sig) {  // whether sig has its default action (no handler)
    struct sigaction now {};
    REQUIRE(::sigaction(sig, nullptr, &now) == 0);
    return now.sa_handler == SIG_DFL;
  };
  {
    TempDirGuard guard(d / "out");
    CHECK_FALSE(interrupted());
    CHECK_FALSE(default_action(SIGINT));  // the guard's handler
    CHECK_FALSE(default_action(SIGTERM));
    REQUIRE(::raise(SIGTERM) == 0);  // runs the handler in this thread (it writes one line to stderr)
    CHECK(interrupted());
    CHECK(interrupt_signal() == SIGTERM);
    CHECK(default_action(SIGINT));  // a second signal, of either kind, now ends the process
    CHECK(default_action(SIGTERM));
    CHECK(fs::exists(guard.path() + "/" + kTempOwnerFile));  // what the next convert removes if it does
  }
  CHECK(siblings_of(d / "out", ".tmp-").empty());
  CHECK(interrupt_signal() == SIGTERM);  // still set for the tool's exit status
}

TEST_CASE("plan_memory: hand-computed per-rank numbers") {
  ScratchDir d;
  LlamaSpec s;
  make_llama(s).save(d / "hf");
  REQUIRE(run_tpshard("convert " + (d / "hf") + " -o " + (d / "out") + " --tp 4 -q", d / "log") == 0);
  const Manifest m = load_manifest(d / "out");
  const MemoryPlan p = plan_memory(m, 4, 2, 8, d / "out");
  // tp 4: heads/rank 2, kv heads/rank 1 (2 KV heads replicated), head_dim 4, ffn/rank 6, vocab 37 -> 40, 10/rank.
  // kv_cache: 2 layers, batch 2 + the scratch slot, 8 positions, 1 kv head/rank, head_dim 4, 2 bytes
  CHECK(p.kv_cache_bytes == 2ull * 2 * 3 * 8 * 1 * 4 * 2);
  // R = 2 decode rows, T = max(2, min(1024, 2*8)) = 16 tokens per step.
  // per token: 16*4 + 3*16*2 + (2+2)*4*2 + 2*4*2 + (12 + 6)*2 + 7*4 (step metadata) = 64 + 96 + 32 + 16 + 36 + 28 = 272
  // per row: 16*2 + (1+4)*10*4 + 8*(1+4) + 2*16*(4+2)*4 = 32 + 200 + 40 + 768 = 1040, plus the argmax's
  // 64 split pairs and counter (64*8 + 4), the split-K counters of the 2 heads (2*4) and the cascade
  // attention's prefix partials (2 heads * 16 splits * (4+2) * 4 = 768): 2332
  CHECK(p.activation_bytes == 16ull * 272 + 2 * 2332);
  CHECK(p.weight_bytes == m.shards.at(4)[0].weight_bytes);
  CHECK(p.workspace_bytes == kWorkspaceBytes);
  CHECK(p.total_bytes() == p.weight_bytes + p.kv_cache_bytes + p.activation_bytes + p.workspace_bytes);
  CHECK_THROWS_AS(plan_memory(m, 2, 1, 1, d / "out"), Error);
  CHECK_THROWS_AS(plan_memory(m, 4, 0, 1, d / "out"), Error);
}

TEST_CASE("tpshard convert / verify load the tokenizer: a corrupt tokenizer.json is named, nothing is written") {
  ScratchDir d;
  LlamaSpec s;
  make_llama(s).save(d / "hf");
  const std::string log = d / "log.txt";
  const std::string good_tok = std::string(TPSHARD_FIXTURES) + "/tokenizers/synthetic-bytelevel/tokenizer.json";
  fs::copy_file(good_tok, d / "hf/tokenizer.json");
  REQUIRE(run_tpshard("convert " + (d / "hf") + " -o " + (d / "out") + " --tp 1", log) == 0);
  CHECK(run_tpshard("verify " + (d / "out"), log) == 0);

  // convert: the error names the checkpoint's file; no OUT (and no OUT.tmp-*) is left.
  write_text(d / "hf/tokenizer.json", "garbage\n");
  CHECK(run_tpshard("convert " + (d / "hf") + " -o " + (d / "out2") + " --tp 1", log) == 1);
  std::string err = read_text(log);
  CHECK(err.rfind("error: ", 0) == 0);
  CHECK(err.find(d / "hf/tokenizer.json") != std::string::npos);
  CHECK(err.find("\nhint: the checkpoint's tokenizer is corrupt or unsupported") != std::string::npos);
  for (const auto& e : fs::directory_iterator(d.path))
    CHECK_MESSAGE(e.path().filename().string().rfind("out2", 0) != 0, "left behind: " << e.path());

  // A corrupt config.json next to a good tokenizer (which reads it for BOS/EOS) is named as itself, and
  // the hint does not tell the user to remove the tokenizer.
  fs::copy_file(good_tok, d / "hf/tokenizer.json", fs::copy_options::overwrite_existing);
  const std::string config = read_text(d / "hf/config.json");
  write_text(d / "hf/config.json", "{\"model_type\":\n");
  CHECK(run_tpshard("convert " + (d / "hf") + " -o " + (d / "out2") + " --tp 1", log) == 1);
  err = read_text(log);
  CHECK_MESSAGE(err.rfind("error: " + (d / "hf/config.json") + ": ", 0) == 0, err);
  CHECK_MESSAGE(err.find("tokenizer") == std::string::npos, err);
  CHECK_FALSE(fs::exists(d / "out2"));
  write_text(d / "hf/config.json", config);

  // verify: a corrupted copy in OUT is named (every shard hash still matches).
  write_text(d / "out/tokenizer.json", "garbage\n");
  CHECK(run_tpshard("verify " + (d / "out"), log) == 1);
  err = read_text(log);
  CHECK(err.find("error: ") != std::string::npos);
  CHECK(err.find(d / "out/tokenizer.json") != std::string::npos);
  CHECK(err.find("hint: the tokenizer is corrupt") != std::string::npos);
  CHECK(err.find("all hashes match") == std::string::npos);
}

TEST_CASE("tpshard verify: the shards' tensors must match manifest.json's model section (an edit without its hash)") {
  ScratchDir d;
  LlamaSpec s;  // 2 layers, hidden 16, intermediate 24
  make_llama(s).save(d / "hf");
  const std::string log = d / "log.txt";
  REQUIRE(run_tpshard("convert " + (d / "hf") + " -o " + (d / "out") + " --tp 1,2", log) == 0);
  const std::string path = d / "out/manifest.json";
  const nlohmann::json original = nlohmann::json::parse(read_text(path));
  // The user deleted the model_section_xxh3 line (load_manifest then accepts edits) and changed a value.
  auto edit = [&](const char* key, int64_t value) {
    nlohmann::json j = original;
    j.erase("model_section_xxh3");
    j["model"][key] = value;
    write_text(path, j.dump(2));
    return run_tpshard("verify " + (d / "out"), log);
  };
  const std::string hint = "hint: manifest.json's \"model\" section does not describe these shards";
  CHECK(edit("num_hidden_layers", 1) == 1);  // fewer layers: tprun would run a 1-layer model silently
  std::string v = read_text(log);
  CHECK(v.find("BAD " + (d / "out/tp1/rank0.tps") + ": holds tensor blk.1.attn_norm.weight, which manifest.json's "
               "model section (num_hidden_layers 1, hidden_size 16) does not call for") != std::string::npos);
  CHECK(v.find("error: 3 of 3 shard file(s) are bad") != std::string::npos);
  CHECK(v.find(hint) != std::string::npos);
  CHECK(edit("num_hidden_layers", 3) == 1);  // more layers: tprun would refuse a missing tensor
  v = read_text(log);
  CHECK(v.find(": has no tensor blk.2.attn_norm.weight, which manifest.json's model section") != std::string::npos);
  CHECK(v.find(hint) != std::string::npos);
  CHECK(edit("intermediate_size", 48) == 1);  // the same names, other shapes
  v = read_text(log);
  CHECK(v.find("BAD " + (d / "out/tp2/rank1.tps") + ": tensor blk.0.ffn_gate_up.weight is [24, 16], manifest.json's "
               "model section (num_hidden_layers 2, hidden_size 16) gives [48, 16] at tp_rank 1 of 2") != std::string::npos);
  // An edit that leaves the tensors as they are (a longer context) still verifies.
  CHECK(edit("max_position_embeddings", original["model"]["max_position_embeddings"].get<int64_t>() * 2) == 0);
  CHECK(read_text(log).find("verified 3 shard file(s)") != std::string::npos);
  // A model section tpshard convert cannot have written: the hint speaks of manifest.json, not config.json.
  CHECK(edit("num_attention_heads", 0) == 1);
  v = read_text(log);
  CHECK_MESSAGE(v.rfind("error: " + path, 0) == 0, v);
  CHECK_MESSAGE(v.find("\nhint: manifest.json's \"model\" section is not what tpshard convert wrote") != std::string::npos, v);
  CHECK(v.find("config.json") == std::string::npos);

  // Top-level fields outside the model section.
  auto edit_top = [&](const char* key, const std::string& value) {
    nlohmann::json j = original;
    j[key] = value;
    write_text(path, j.dump(2));
    return run_tpshard("verify " + (d / "out"), log);
  };
  const std::string dtype = original["dtype"].get<std::string>();
  const std::string other = dtype == "bf16" ? "f16" : "bf16";
  CHECK(edit_top("dtype", other) == 1);  // the shards are still in the original dtype
  v = read_text(log);
  CHECK_MESSAGE(v.find(" is " + dtype + ", manifest.json's \"dtype\" says " + other) !=
                    std::string::npos, v);
  CHECK(run_tpshard("inspect " + (d / "out"), log) == 1);  // inspect reads the tensor tables too
  v = read_text(log);
  CHECK_MESSAGE(v.find(" is " + dtype + ", manifest.json's \"dtype\" says " + other) != std::string::npos, v);
  CHECK(edit_top("dtype", "q4") == 1);
  v = read_text(log);
  CHECK_MESSAGE(v.rfind("error: " + path + ": \"dtype\": unknown dtype 'q4'", 0) == 0, v);
  CHECK(edit_top("format", "gguf") == 1);
  v = read_text(log);
  CHECK_MESSAGE(v.rfind("error: " + path + ": \"format\" is \"gguf\", not \"tpshard\"\n", 0) == 0, v);
  write_text(path, original.dump(2));
  CHECK(run_tpshard("verify " + (d / "out"), log) == 0);
  // A shard file that is not there: named, with a hint that fits (not "the file is corrupt").
  fs::rename(d / "out/tp2/rank1.tps", d / "rank1.tps");
  CHECK(run_tpshard("verify " + (d / "out"), log) == 1);
  v = read_text(log);
  CHECK_MESSAGE(v.find((d / "out/tp2/rank1.tps") + ": missing (listed in manifest.json)") != std::string::npos, v);
  CHECK_MESSAGE(v.find("\nhint: the directory is incomplete") != std::string::npos, v);
  fs::rename(d / "rank1.tps", d / "out/tp2/rank1.tps");
}

TEST_CASE("tpshard plan from a Hugging Face directory or a bare config.json, at any tp x pp, before converting") {
  ScratchDir d;
  LlamaSpec s;
  s.heads = 10;
  s.kv_heads = 2;
  s.hidden = 40;
  s.layers = 3;
  make_llama(s).save(d / "hf");
  const std::string log = d / "log.txt";
  REQUIRE(run_tpshard("plan " + (d / "hf/config.json") + " --tp 3 --pp 2 --batch 4 --max-seq 64 --gpu-mem 1", log) == 0);
  std::string out = read_text(log);
  CHECK(out.find("per-GPU memory plan: tp 3 x pp 2") != std::string::npos);
  CHECK(out.find("from config.json's tensor plan, not converted") != std::string::npos);
  CHECK(out.find("largest batch that fits at max_seq 64:") != std::string::npos);
  CHECK(out.find("heaviest rank (pp_stage") != std::string::npos);
  REQUIRE(run_tpshard("plan " + (d / "hf") + " --tp 7 --batch 4 --max-seq 64", log) == 0);  // uneven tp, the directory
  // refusals: more ranks than heads; a directory that is neither; a batch that does not fit names one that does
  CHECK(run_tpshard("plan " + (d / "hf") + " --tp 11 --batch 4 --max-seq 64", log) == 1);
  CHECK(read_text(log).find("tp_size 11 is larger than num_attention_heads 10") != std::string::npos);
  CHECK(run_tpshard("plan " + d.path.string() + " --tp 1 --batch 1 --max-seq 8", log) == 1);
  CHECK(read_text(log).find("neither a converted model (manifest.json) nor a Hugging Face directory") != std::string::npos);
  CHECK(run_tpshard("plan " + (d / "hf") + " --tp 1 --batch 100000 --max-seq 64 --gpu-mem 0.5", log) == 1);
  CHECK(read_text(log).find("hint: use --batch ") != std::string::npos);
  CHECK(read_text(log).find("does not fit in 0.5 GiB\n") != std::string::npos);  // --gpu-mem as given, not 0.500000

  // the inverse questions: the largest batch (no --batch) or max_seq (no --max-seq) that fits in --gpu-mem,
  // against the plan computed here: plan(answer) fits, plan(answer + 1) does not
  const ModelConfig c = load_hf_config(d / "hf");
  const double gib = 0.2504;  // 256 MiB of workspace + about 430 KB
  const uint64_t cap = static_cast<uint64_t>(gib * 1073741824.0);
  auto total = [&](int64_t batch, int64_t seq) {
    return plan_memory_for_config(c, DType::BF16, 3, 2, batch, seq).total_bytes();
  };
  int64_t batch = 1;
  while (total(batch + 1, 32) <= cap) ++batch;
  REQUIRE(batch > 1);
  REQUIRE(run_tpshard("plan " + (d / "hf") + " --tp 3 --pp 2 --dp 4 --max-seq 32 --gpu-mem 0.2504", log) == 0);
  out = read_text(log);
  CHECK_MESSAGE(out.find("per-GPU memory plan: tp 3 x pp 2 x dp 4, batch " + std::to_string(batch) + ", max_seq 32,") !=
                    std::string::npos,
                out);
  CHECK(out.find("  batch " + std::to_string(batch) + " is the largest that fits in 0.2504 GiB at max_seq 32\n") !=
        std::string::npos);
  CHECK(out.find(" 24  (4 replicas of tp 3 x pp 2;") != std::string::npos);  // the GPU count: tp x pp x dp
  int64_t seq = 1;  // at that batch: at least 32, less than the model's 64
  while (seq < 64 && total(batch, seq + 1) <= cap) ++seq;
  REQUIRE(seq >= 32);
  REQUIRE(seq < 64);
  const std::string b = std::to_string(batch);
  REQUIRE(run_tpshard("plan " + (d / "hf") + " --tp 3 --pp 2 --batch " + b + " --gpu-mem 0.2504", log) == 0);
  out = read_text(log);
  CHECK_MESSAGE(out.find("max_seq " + std::to_string(seq) + " is the largest that fits in 0.2504 GiB at batch " + b + "\n") !=
                    std::string::npos,
                out);
  CHECK(out.find("largest max_seq that fits at batch " + b + ": " + std::to_string(seq) + "\n") != std::string::npos);
  // without --max-seq and --gpu-mem: tprun's default, min(max_position_embeddings 64, 2048)
  REQUIRE(run_tpshard("plan " + (d / "hf") + " --tp 1 --batch 2", log) == 0);
  CHECK(read_text(log).find("batch 2, max_seq 64, dtype bf16\n") != std::string::npos);
  // nothing to solve for, or nothing fits
  CHECK(run_tpshard("plan " + (d / "hf") + " --tp 1", log) == 1);
  CHECK(read_text(log) == "error: plan: --batch is needed without --gpu-mem\nhint: pass --batch B, or --gpu-mem GIB for "
                          "the largest batch that fits\n");
  CHECK(run_tpshard("plan " + (d / "hf") + " --tp 1 --gpu-mem 0.1", log) == 1);
  CHECK(read_text(log).find("error: plan: even batch 1 at max_seq 64 does not fit in 0.1 GiB") != std::string::npos);

  // --shared-prefix: planned as the runtime runs it, the prefix in one more slot (batch 4 + 1 sequences)
  auto kv_line = [&](const std::string& args) {
    REQUIRE(run_tpshard("plan " + (d / "hf") + " --tp 1 --max-seq 64 " + args, log) == 0);
    const std::string o = read_text(log);
    const size_t at = o.find("  kv_cache");
    REQUIRE(at != std::string::npos);
    return o.substr(at, o.find('\n', at) - at);
  };
  CHECK(kv_line("--batch 4 --shared-prefix 20") == kv_line("--batch 5"));
  CHECK(kv_line("--batch 4 --shared-prefix 0") == kv_line("--batch 4"));
  REQUIRE(run_tpshard("plan " + (d / "hf") + " --tp 1 --batch 4 --max-seq 64 --shared-prefix 20", log) == 0);
  out = read_text(log);
  CHECK(out.find("shared prefix of 20 tokens: prefilled once per batch (60 prompt tokens fewer)") != std::string::npos);
  CHECK(out.find("run tprun with --max-batch 5") != std::string::npos);
  CHECK(out.find("not implemented: kv_cache slots are fixed-size") != std::string::npos);
  CHECK(run_tpshard("plan " + (d / "hf") + " --tp 1 --batch 4 --max-seq 64 --shared-prefix 64", log) == 1);
  CHECK(read_text(log).find("--shared-prefix 64 is not below --max-seq 64") != std::string::npos);
}

TEST_CASE("tpshard convert / plan ORG/NAME[@REVISION]: the snapshot of the local Hugging Face cache, symlinks to blobs as "
          "huggingface_hub writes them; a repo or revision not cached is named with the download command") {
  ScratchDir d;
  LlamaSpec s;
  make_llama(s).save(d / "hf");
  // CACHE/models--org--tiny-llama: blobs/, refs/main -> commit, snapshots/COMMIT/FILE -> ../../blobs/FILE
  const fs::path repo = fs::path(d / "hub") / "models--org--tiny-llama";
  const std::string commit = "0123456789abcdef0123456789abcdef01234567";
  fs::create_directories(repo / "blobs");
  fs::create_directories(repo / "refs");
  fs::create_directories(repo / "snapshots" / commit);
  for (const auto& e : fs::directory_iterator(d / "hf")) {
    const std::string name = e.path().filename().string();
    fs::copy_file(e.path(), repo / "blobs" / ("blob-" + name));
    fs::create_symlink(fs::path("../../blobs") / ("blob-" + name), repo / "snapshots" / commit / name);
  }
  write_text((repo / "refs" / "main").string(), commit);
  const std::string env = "HF_HUB_CACHE=" + (d / "hub") + " ";
  const std::string log = d / "log.txt";
  auto run = [&](const std::string& args) {
    const std::string cmd = env + std::string(TPSHARD_BIN) + " " + args + " >" + log + " 2>&1";
    const int rc = std::system(cmd.c_str());
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  };
  REQUIRE(run("convert org/tiny-llama -o " + (d / "out") + " --tp 1,2") == 0);
  CHECK(read_text(log).find("org/tiny-llama is " + (repo / "snapshots" / commit).string() + " (Hugging Face cache)") !=
        std::string::npos);
  CHECK(load_manifest(d / "out").shards.count(2) == 1);
  REQUIRE(run("convert org/tiny-llama@" + commit + " -o " + (d / "out2") + " --tp 1") == 0);  // a commit hash
  CHECK(run("plan org/tiny-llama --tp 2 --batch 2 --max-seq 16") == 0);
  CHECK(run("convert org/tiny-llama@v9 -o " + (d / "out3")) == 1);
  CHECK(read_text(log) == "error: org/tiny-llama@v9: revision v9 is not in the Hugging Face cache (" + repo.string() +
                              " has no refs/v9 or snapshots/v9)\nhint: download it first, e.g. `hf download "
                              "org/tiny-llama --revision v9` (huggingface_hub), or pass the model's local directory\n");
  // a ref whose snapshot is gone: the ref and the missing snapshot are named
  write_text((repo / "refs" / "stale").string(), "deadbeef");
  CHECK(run("convert org/tiny-llama@stale -o " + (d / "out3")) == 1);
  CHECK(read_text(log).rfind("error: org/tiny-llama@stale: " + (repo / "refs" / "stale").string() +
                                 " names commit 'deadbeef', whose snapshot is not in the cache (" +
                                 (repo / "snapshots" / "deadbeef").string() + " does not exist)\n",
                             0) == 0);
  CHECK(run("convert other/model -o " + (d / "out3")) == 1);
  CHECK(read_text(log).find("other/model: not a local directory, and not in the Hugging Face cache") != std::string::npos);
  CHECK_FALSE(fs::exists(d / "out3"));
  // a snapshot with config.json only (`hf download org/config-only config.json`): plan works, convert names the
  // missing weights and the download command, writing nothing
  const fs::path partial = fs::path(d / "hub") / "models--org--config-only";
  fs::create_directories(partial / "refs");
  fs::create_directories(partial / "snapshots" / commit);
  fs::copy_file(d / "hf/config.json", partial / "snapshots" / commit / "config.json");
  write_text((partial / "refs" / "v1").string(), commit);
  CHECK(run("plan org/config-only@v1 --tp 2 --batch 2 --max-seq 16") == 0);
  CHECK(run("convert org/config-only@v1 -o " + (d / "out3")) == 1);
  CHECK(read_text(log).find("error: org/config-only@v1: the Hugging Face cache holds " +
                            (partial / "snapshots" / commit).string() + " without the weights (no model.safetensors") !=
        std::string::npos);
  CHECK(read_text(log).find("hint: download the whole repository: `hf download org/config-only --revision v1` "
                            "(huggingface_hub)\n") != std::string::npos);
  CHECK_FALSE(fs::exists(d / "out3"));
  // paths that are not there are reported as paths, never looked up as repo ids ("./x" is no ORG/NAME)
  for (const std::string path : {"./missing", "../missing", "/missing", "org/", ".hidden/model", "org/-name"}) {
    INFO(path);
    CHECK(run("convert " + path + " -o " + (d / "out3")) == 1);
    CHECK(read_text(log) == "error: " + path + ": cannot open (No such file or directory)\nhint: give the Hugging Face "
                                "model directory (it holds config.json and *.safetensors)\n");
  }
  CHECK_FALSE(fs::exists(d / "out3"));
}
