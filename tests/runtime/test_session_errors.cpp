// test_session_errors.cpp: run_on_ranks failure paths on the CPU backend: a rank that throws does not
// deadlock the others and its error is the one reported; tp size not in the manifest; missing,
// truncated and corrupted shards; a manifest from another format version; max_seq_len limits
// (max_position_embeddings; a sliding window does not limit it).
#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "format/error.h"
#include "format/hash.h"
#include "format/shard_file.h"
#include "runtime/process_memory.h"
#include "runtime/session.h"

using namespace tpshard;
namespace fs = std::filesystem;

namespace {

/// A fresh converted copy of tiny-llama (tp 1 and 2) that a test may damage.
std::string scratch_model(const std::string& tag) {
  const std::string out = std::string(TPSHARD_TEST_OUT_DIR) + "/damaged-" + tag;
  fs::create_directories(TPSHARD_TEST_OUT_DIR);
  const std::string cmd = std::string(TPSHARD_BIN_DIR) + "/tpshard convert " + TPSHARD_FIXTURES_DIR +
                          "/tiny-llama -o " + out + " --tp 1,2 --force -q";
  REQUIRE(std::system(cmd.c_str()) == 0);
  return out;
}

SessionOptions opts(const std::string& dir, int tp) {
  SessionOptions o;
  o.model_dir = dir;
  o.tp_size = tp;
  o.device = Device::Cpu;
  o.max_seq_len = 32;
  o.quiet = true;
  return o;
}

std::string error_of(const SessionOptions& o, const std::function<void(RankContext&)>& fn = [](RankContext&) {}) {
  try {
    run_on_ranks(o, fn);
  } catch (const Error& e) {
    return std::string(e.what()) + " | hint: " + e.hint();
  }
  return "";
}

}  // namespace

TEST_CASE("an exception on one rank stops the others (no deadlock) and is the error reported") {
  const std::string dir = scratch_model("throw");
  const std::string msg = error_of(opts(dir, 2), [](RankContext& ctx) {
    if (ctx.tp_rank == 1) throw Error("rank one exploded", "none");
    float x = 1;
    for (int i = 0; i < 3; ++i) ctx.comm->all_reduce_sum(&x, 1, DType::F32);  // rank 0 waits for rank 1
  });
  CHECK(msg.find("rank one exploded") != std::string::npos);
}

TEST_CASE("tp size missing from the manifest is refused") {
  const std::string dir = scratch_model("tp");
  const std::string msg = error_of(opts(dir, 4));
  CHECK(!msg.empty());
  MESSAGE(msg);
}

TEST_CASE("missing, truncated and corrupted shards are refused, naming the file") {
  const std::string dir = scratch_model("shards");
  const std::string rank1 = dir + "/tp2/rank1.tps";
  REQUIRE(fs::exists(rank1));
  fs::rename(rank1, rank1 + ".bak");
  std::string msg = error_of(opts(dir, 2));
  CHECK(msg.find("rank1.tps") != std::string::npos);
  CHECK(msg.find("missing") != std::string::npos);
  fs::rename(rank1 + ".bak", rank1);
  CHECK(error_of(opts(dir, 2)).empty());

  // Truncated: size differs from the manifest.
  const auto size = fs::file_size(rank1);
  fs::resize_file(rank1, size - 100);
  msg = error_of(opts(dir, 2));
  CHECK(msg.find("rank1.tps") != std::string::npos);

  // Corrupted: same size, one byte of the first tensor flipped -> tensor hash mismatch.
  const std::string rank0 = dir + "/tp1/rank0.tps";
  uint64_t data_offset = 0;
  {
    ShardReader r(rank0);
    data_offset = r.header().data_offset + r.tensors().front().file_offset;
  }
  {
    std::fstream f(rank0, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(static_cast<std::streamoff>(data_offset));
    char c = 0;
    f.read(&c, 1);
    c = static_cast<char>(c ^ 0x5a);
    f.seekp(static_cast<std::streamoff>(data_offset));
    f.write(&c, 1);
  }
  msg = error_of(opts(dir, 1));
  CHECK(msg.find("rank0.tps") != std::string::npos);
  MESSAGE(msg);
}

TEST_CASE("a manifest of another format version is refused") {
  const std::string dir = scratch_model("version");
  nlohmann::json m;
  {
    std::ifstream f(dir + "/manifest.json");
    m = nlohmann::json::parse(f);
  }
  m["format_version"] = 999;
  {
    std::ofstream f(dir + "/manifest.json");
    f << m.dump(2);
  }
  const std::string msg = error_of(opts(dir, 1));
  CHECK(msg.find("manifest.json") != std::string::npos);
  MESSAGE(msg);
}

TEST_CASE("--max-seq-len beyond max_position_embeddings is refused") {
  const std::string dir = scratch_model("seq");
  SessionOptions o = opts(dir, 1);
  o.max_seq_len = 100000;
  CHECK(error_of(o).find("max_position_embeddings") != std::string::npos);
}

TEST_CASE("sliding-window models: the window does not limit max_seq_len") {
  ModelConfig c;
  c.max_position_embeddings = 32768;
  c.sliding_window = 4096;  // Mistral v0.1
  c.layer_windows.assign(2, 4096);
  SessionOptions o;
  CHECK(effective_max_seq_len(o, c) == 2048);  // min(2048, max_position_embeddings)
  c.sliding_window = 1000;
  c.layer_windows.assign(2, 1000);
  CHECK(effective_max_seq_len(o, c) == 2048);
  o.max_seq_len = 20000;
  CHECK(effective_max_seq_len(o, c) == 20000);  // only max_position_embeddings limits
}

TEST_CASE("a shard of another conversion (same architecture, same size) is refused by its table hash") {
  const std::string dir = scratch_model("foreign-shard");
  // Another conversion of tiny-llama with other weights: every even data byte of the safetensors file
  // (a low byte of each 2- or 4-byte element: mantissa bits) flipped; the shards keep their sizes.
  const std::string hf = std::string(TPSHARD_TEST_OUT_DIR) + "/tiny-llama-other-weights";
  fs::remove_all(hf);
  fs::copy(std::string(TPSHARD_FIXTURES_DIR) + "/tiny-llama", hf, fs::copy_options::recursive);
  {
    std::fstream f(hf + "/model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    REQUIRE(f.good());
    uint64_t header_bytes = 0;
    f.read(reinterpret_cast<char*>(&header_bytes), 8);
    const uint64_t size = fs::file_size(hf + "/model.safetensors");
    for (uint64_t off = 8 + header_bytes; off < size; off += 2) {
      f.seekg(static_cast<std::streamoff>(off));
      char c = 0;
      f.get(c);
      f.seekp(static_cast<std::streamoff>(off));
      f.put(static_cast<char>(c ^ 0x01));
    }
  }
  const std::string other = std::string(TPSHARD_TEST_OUT_DIR) + "/damaged-foreign-shard-other";
  const std::string cmd = std::string(TPSHARD_BIN_DIR) + "/tpshard convert " + hf + " -o " + other + " --tp 2 --force -q";
  REQUIRE(std::system(cmd.c_str()) == 0);
  const std::string shard = dir + "/tp2/rank1.tps";
  const uint64_t own = ShardReader(shard).header().table_xxh3;
  const uint64_t foreign = ShardReader(other + "/tp2/rank1.tps").header().table_xxh3;
  REQUIRE(own != foreign);
  REQUIRE(fs::file_size(shard) == fs::file_size(other + "/tp2/rank1.tps"));  // the size check cannot see it
  fs::copy_file(other + "/tp2/rank1.tps", shard, fs::copy_options::overwrite_existing);
  CHECK(error_of(opts(dir, 2)) == shard + " does not belong to this model (manifest " + dir +
                                      "/manifest.json records table hash " + hash_to_hex(own) + ", the shard has " +
                                      hash_to_hex(foreign) +
                                      ") | hint: re-run tpshard convert, or copy the whole converted directory");
  CHECK(error_of(opts(dir, 1)) == "");  // tp 1 is intact

  // A manifest written before table_xxh3 was recorded: loads as before, nothing said.
  nlohmann::json j;
  {
    std::ifstream f(dir + "/manifest.json");
    f >> j;
  }
  for (auto& [size, shards] : j["tp"].items())
    for (auto& e : shards) e.erase("table_xxh3");
  std::ofstream(dir + "/manifest.json", std::ios::trunc) << j.dump(2) << "\n";
  CHECK(error_of(opts(dir, 2)) == "");
}

TEST_CASE("CPU memory preflight: weights beyond the available memory are refused naming the model; a kv_cache beyond it warns") {
  using tpshard::check_cpu_memory;
  const uint64_t gib = 1ull << 30;
  CHECK(check_cpu_memory(10 * gib, 5 * gib, 0, "M").empty());        // unknown: no check
  CHECK(check_cpu_memory(10 * gib, 5 * gib, 16 * gib, "M").empty());  // fits
  const std::string w = check_cpu_memory(10 * gib, 8 * gib, 16 * gib, "M");
  CHECK(w.find("kv_cache (8.00 GiB)") != std::string::npos);
  CHECK(w.find("--max-batch") != std::string::npos);
  try {
    check_cpu_memory(20 * gib, 0, 16 * gib, "models/big");
    FAIL("not refused");
  } catch (const tpshard::Error& e) {
    CHECK(std::string(e.what()).find("models/big take 20.00 GiB") != std::string::npos);
    CHECK(e.hint().find("--device cuda") != std::string::npos);
  }
  CHECK(tpshard::available_host_memory_bytes() > 0);  // this machine has /proc/meminfo
}
