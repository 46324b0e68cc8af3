// test_weight_arena.cpp: WeightArena (runtime/cuda/weight_arena.h) on the GPU. Shards are written
// (tests/load/shard_fixtures.h) with ShardWriter from known, position-dependent bytes; the arena is copied back and compared byte for
// byte: against the file's data section (uncompressed), against the written tensors (every codec), and
// across ring sizes / reader counts. Corrupted and truncated shards must be refused with the tensor named.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "format/error.h"
#include "format/hash.h"
#include "format/shard_file.h"
#include "runtime/cuda/check.h"
#include "runtime/cuda/weight_arena.h"
#include "tests/load/shard_fixtures.h"

using namespace tpshard;
using tpshard::cuda::LoadOptions;
using tpshard::cuda::LoadReport;
using tpshard::cuda::WeightArena;

namespace {

using test::make_tensors;
using test::read_file_range;
using test::TestTensor;
using test::write_shard;
std::string temp_dir() { return test::shard_temp_dir(); }

std::vector<uint8_t> arena_to_host(const WeightArena& a) {
  std::vector<uint8_t> h(a.bytes());
  TPS_CUDA_CHECK(cudaMemcpy(h.data(), a.base(), a.bytes(), cudaMemcpyDeviceToHost));
  return h;
}

void check_tensors(const WeightArena& a, const std::vector<uint8_t>& host, const std::vector<TestTensor>& ts) {
  for (const auto& t : ts) {
    const TensorRecord& r = a.record(t.name);
    REQUIRE(r.raw_bytes == t.bytes.size());
    CHECK(static_cast<const uint8_t*>(a.at(t.name)) == static_cast<const uint8_t*>(a.base()) + r.arena_offset);
    CHECK_MESSAGE(std::memcmp(host.data() + r.arena_offset, t.bytes.data(), t.bytes.size()) == 0, t.name);
  }
}

}  // namespace

TEST_CASE("arena bytes equal the file's data section exactly (uncompressed)") {
  const auto ts = make_tensors();
  const std::string path = write_shard(temp_dir() + "/plain.tps", ts, Codec::None);
  ShardReader shard(path);
  for (size_t ring_bytes : {size_t(64) << 10, size_t(64) << 20}) {
    for (int readers : {1, 3}) {
      LoadOptions lo;
      lo.ring_buffers = 4;
      lo.ring_buffer_bytes = ring_bytes;
      lo.reader_threads = readers;
      LoadReport rep;
      WeightArena a(shard, lo, &rep);
      REQUIRE(a.bytes() == shard.header().arena_bytes);
      const auto host = arena_to_host(a);
      const auto data = read_file_range(path, shard.header().data_offset, shard.header().arena_bytes);
      CHECK(xxh3_64(host.data(), host.size()) == xxh3_64(data.data(), data.size()));
      CHECK(std::memcmp(host.data(), data.data(), host.size()) == 0);
      check_tensors(a, host, ts);
      CHECK(rep.arena_bytes == a.bytes());
      CHECK(rep.pinned_bytes <= 4 * ring_bytes);  // bounded by the ring options
      CHECK(rep.pinned_bytes >= 4 * std::min<size_t>(ring_bytes, 600000));  // the largest tensor fits in one buffer
      CHECK(rep.reader_threads == readers);
      CHECK(a.find("no.such.tensor") == nullptr);
      CHECK_THROWS_AS(a.at("no.such.tensor"), Error);
    }
  }
}

TEST_CASE("O_DIRECT reads give the same arena") {
  const auto ts = make_tensors();
  const std::string path = write_shard(temp_dir() + "/direct.tps", ts, Codec::None);
  ShardReader shard(path);
  LoadOptions lo;
  lo.ring_buffer_bytes = 64 << 10;
  lo.direct_io = true;
  try {
    WeightArena a(shard, lo);
    check_tensors(a, arena_to_host(a), ts);
  } catch (const Error& e) {
    // tmpfs has no O_DIRECT: the loader must say so clearly.
    CHECK(std::string(e.what()).find("O_DIRECT") != std::string::npos);
    MESSAGE("O_DIRECT not supported here: " << e.what());
  }
}

TEST_CASE("zstd and byte-plane tensors decompress into the same arena as the raw file") {
  const auto ts = make_tensors();
  const std::string dir = temp_dir();
  ShardReader plain(write_shard(dir + "/plain2.tps", ts, Codec::None));
  WeightArena ref(plain, LoadOptions{});
  const auto ref_host = arena_to_host(ref);
  for (Codec codec : {Codec::Zstd, Codec::ZstdBytePlanes}) {
    ShardReader z(write_shard(dir + "/z" + std::to_string(int(codec)) + ".tps", ts, codec));
    for (size_t ring_bytes : {size_t(16) << 10, size_t(64) << 20}) {
      LoadOptions lo;
      lo.ring_buffers = 2;
      lo.ring_buffer_bytes = ring_bytes;
      lo.reader_threads = 2;
      WeightArena a(z, lo);
      const auto host = arena_to_host(a);
      REQUIRE(host.size() == ref_host.size());
      check_tensors(a, host, ts);
    }
  }
}

TEST_CASE("a corrupted shard is refused, naming the tensor; without verification it loads") {
  const auto ts = make_tensors();
  const std::string dir = temp_dir();
  for (Codec codec : {Codec::None, Codec::ZstdBytePlanes}) {
    const std::string path = write_shard(dir + "/bad" + std::to_string(int(codec)) + ".tps", ts, codec);
    uint64_t at = 0;
    std::string victim;
    {
      ShardReader s(path);
      const TensorRecord& r = s.at("blk.0.attn_qkv.weight");
      at = s.header().data_offset + r.file_offset + r.stored_bytes / 2;
      victim = r.name;
    }
    test::flip_byte(path, at);
    ShardReader s(path);
    std::string msg;
    try {
      WeightArena a(s, LoadOptions{});
    } catch (const Error& e) {
      msg = e.what();
    }
    CHECK_MESSAGE(msg.find(victim) != std::string::npos, msg);
    CHECK_MESSAGE((msg.find("corrupt") != std::string::npos || msg.find("zstd") != std::string::npos), msg);
    CHECK_MESSAGE(msg.find(path) != std::string::npos, msg);
    if (codec == Codec::None) {
      LoadOptions lo;
      lo.verify_hashes = false;
      WeightArena a(s, lo);  // the damage is only caught by the hash
      CHECK(a.bytes() == s.header().arena_bytes);
    }
  }
}

TEST_CASE("a shard that was truncated after opening is refused") {
  const auto ts = make_tensors();
  const std::string path = write_shard(temp_dir() + "/trunc.tps", ts, Codec::None);
  ShardReader s(path);
  std::filesystem::resize_file(path, s.header().data_offset + 5000);
  std::string msg;
  try {
    WeightArena a(s, LoadOptions{});
  } catch (const Error& e) {
    msg = e.what();
  }
  CHECK_MESSAGE(msg.find("truncated") != std::string::npos, msg);
}
