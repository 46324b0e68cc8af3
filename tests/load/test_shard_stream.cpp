// test_shard_stream.cpp: the shard loader (runtime/load/shard_stream.h) on the host target, so the
// reader threads, the staging ring, the read paths (pread, O_DIRECT, io_uring) and the hash checks that
// the GPU path uses run without a GPU. Shards from tests/load/shard_fixtures.h; the loaded weights are
// compared byte for byte with the file's data section and with the written tensors.
#include <doctest/doctest.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "format/error.h"
#include "format/shard_file.h"
#include "runtime/load/load_target.h"
#include "runtime/load/shard_stream.h"
#include "tests/load/shard_fixtures.h"

using namespace tpshard;
using load::IoEngine;
using load::LoadOptions;
using load::LoadReport;

namespace {

/// On the build directory's file system (the system temp directory may be tmpfs, which has no O_DIRECT).
std::string dir() { return test::shard_temp_dir(TPSHARD_TEST_OUT_DIR); }

struct Loaded {
  std::vector<uint8_t> weights;
  LoadReport report;
};

Loaded load_host(const ShardReader& shard, const LoadOptions& lo) {
  Loaded l;
  l.weights.assign(shard.header().arena_bytes, 0);
  load::HostLoadTarget target(l.weights.data(), l.weights.size());
  load::stream_shard(shard, lo, target, l.report);
  return l;
}

void check_tensors(const ShardReader& shard, const std::vector<uint8_t>& w, const std::vector<test::TestTensor>& ts) {
  for (const auto& t : ts) {
    const TensorRecord& r = shard.at(t.name);
    REQUIRE(r.raw_bytes == t.bytes.size());
    CHECK_MESSAGE(std::memcmp(w.data() + r.arena_offset, t.bytes.data(), t.bytes.size()) == 0, t.name);
  }
}

std::string load_error(const ShardReader& shard, const LoadOptions& lo) {
  try {
    load_host(shard, lo);
  } catch (const Error& e) {
    return e.what();
  }
  return {};
}

/// O_DIRECT works on this file system (not on tmpfs).
bool direct_io_works(const ShardReader& shard) {
  LoadOptions lo;
  lo.direct_io = true;
  lo.io = IoEngine::Pread;
  return load_error(shard, lo).find("O_DIRECT") == std::string::npos;
}

}  // namespace

TEST_CASE("weights equal the data section at 1..16 reader threads, every read path") {
  const auto ts = test::make_tensors(3);  // two 1.8 MB tensors: many chunks per tensor
  const std::string path = test::write_shard(dir() + "/plain.tps", ts, Codec::None);
  ShardReader shard(path);
  const auto data = test::read_file_range(path, shard.header().data_offset, shard.header().arena_bytes);
  const bool direct_ok = direct_io_works(shard);
  if (!direct_ok) MESSAGE("O_DIRECT is not supported on " << path << ": its cases are skipped");
  struct Path {
    IoEngine io;
    bool direct;
    int depth;
  };
  const std::vector<Path> paths = {{IoEngine::Pread, false, 1}, {IoEngine::Pread, true, 1}, {IoEngine::Uring, false, 4},
                                   {IoEngine::Auto, true, 1},   {IoEngine::Auto, true, 4},  {IoEngine::Auto, true, 16}};
  for (const Path& p : paths) {
    if (p.direct && !direct_ok) continue;
    for (int readers : {1, 2, 3, 5, 8, 16}) {
      for (size_t ring_bytes : {size_t(64) << 10, size_t(2) << 20}) {
        LoadOptions lo;
        lo.io = p.io;
        lo.direct_io = p.direct;
        lo.queue_depth = p.depth;
        lo.reader_threads = readers;
        lo.ring_buffer_bytes = ring_bytes;
        CAPTURE(readers);
        CAPTURE(ring_bytes);
        CAPTURE(p.depth);
        const Loaded l = load_host(shard, lo);
        CAPTURE(l.report.io);
        if (readers == 1 && ring_bytes == (size_t(64) << 10)) MESSAGE("read path: " << l.report.io << ", depth " << l.report.queue_depth);
        REQUIRE(l.weights.size() == data.size());
        CHECK(std::memcmp(l.weights.data(), data.data(), data.size()) == 0);
        check_tensors(shard, l.weights, ts);
        CHECK(l.report.reader_threads == std::min(readers, 6));  // 6 tensors: no more threads than tensors
        CHECK(l.report.reader_threads >= 1);
        CHECK(l.report.io.find(p.direct ? "O_DIRECT" : "") != std::string::npos);
        if (p.io == IoEngine::Pread) CHECK(l.report.io.rfind("pread", 0) == 0);
        const bool uring = l.report.io.rfind("io_uring", 0) == 0;  // where the kernel allows io_uring
        CHECK(uring == (uring && (p.io == IoEngine::Uring || (p.io == IoEngine::Auto && p.direct))));
        CHECK(l.report.queue_depth == (uring ? p.depth : 1));
      }
    }
  }
}

TEST_CASE("every stored byte is read exactly once") {
  const auto ts = test::make_tensors(2);
  ShardReader shard(test::write_shard(dir() + "/count.tps", ts, Codec::None));
  uint64_t stored = 0;
  for (const auto& r : shard.tensors()) stored += r.stored_bytes;
  for (int readers : {1, 7}) {
    LoadOptions lo;
    lo.reader_threads = readers;
    lo.ring_buffer_bytes = 32 << 10;
    CHECK(load_host(shard, lo).report.file_bytes == stored);
  }
}

TEST_CASE("zstd and byte-plane tensors decompress to the written tensors") {
  const auto ts = test::make_tensors();
  for (Codec codec : {Codec::Zstd, Codec::ZstdBytePlanes}) {
    ShardReader z(test::write_shard(dir() + "/z" + std::to_string(int(codec)) + ".tps", ts, codec));
    for (int readers : {1, 4, 16}) {
      for (size_t ring_bytes : {size_t(16) << 10, size_t(2) << 20}) {
        LoadOptions lo;
        lo.reader_threads = readers;
        lo.ring_buffer_bytes = ring_bytes;
        lo.ring_buffers = 3;
        const Loaded l = load_host(z, lo);
        check_tensors(z, l.weights, ts);
      }
    }
  }
}

TEST_CASE("a flipped byte in any chunk is caught and the tensor named, by every thread count and read path") {
  const auto ts = test::make_tensors(3);
  const std::string clean = test::write_shard(dir() + "/clean.tps", ts, Codec::None);
  const bool direct_ok = direct_io_works(ShardReader(clean));
  const size_t ring_bytes = 64 << 10;  // chunks of 56 KiB
  const uint64_t chunk = ring_bytes - 2 * 4096;
  uint64_t data_offset = 0, file_offset = 0, stored = 0;
  {
    ShardReader s(clean);
    const TensorRecord& r = s.at("output.weight");
    data_offset = s.header().data_offset;
    file_offset = r.file_offset;
    stored = r.stored_bytes;
  }
  // First byte, a byte in the middle chunk, the last byte of a chunk, the tensor's last byte.
  const std::vector<uint64_t> where = {0, (stored / chunk / 2) * chunk + 17, chunk - 1, stored - 1};
  int n = 0;
  for (uint64_t at : where) {
    const std::string path = dir() + "/flip" + std::to_string(n++) + ".tps";
    std::filesystem::copy_file(clean, path, std::filesystem::copy_options::overwrite_existing);
    test::flip_byte(path, data_offset + file_offset + at);
    ShardReader s(path);
    for (int readers : {1, 4, 16}) {
      for (int mode = 0; mode < 3; ++mode) {
        if (mode == 2 && !direct_ok) continue;
        LoadOptions lo;
        lo.reader_threads = readers;
        lo.ring_buffer_bytes = ring_bytes;
        lo.io = mode == 0 ? IoEngine::Pread : IoEngine::Uring;
        lo.direct_io = mode == 2;
        const std::string msg = load_error(s, lo);
        CAPTURE(at);
        CAPTURE(readers);
        CAPTURE(mode);
        CHECK_MESSAGE(msg.find("output.weight") != std::string::npos, msg);
        CHECK_MESSAGE(msg.find("corrupt") != std::string::npos, msg);
        CHECK_MESSAGE(msg.find(path) != std::string::npos, msg);
      }
    }
    LoadOptions off;
    off.verify_hashes = false;
    const Loaded l = load_host(s, off);  // only the hash catches it
    CHECK(l.weights.size() == s.header().arena_bytes);
  }
}

TEST_CASE("a shard truncated after opening is refused as truncated, every read path") {
  const auto ts = test::make_tensors();
  const std::string path = test::write_shard(dir() + "/trunc.tps", ts, Codec::None);
  ShardReader s(path);
  std::filesystem::resize_file(path, s.header().data_offset + 5000);
  for (IoEngine io : {IoEngine::Pread, IoEngine::Uring}) {
    for (int readers : {1, 6}) {
      LoadOptions lo;
      lo.io = io;
      lo.reader_threads = readers;
      const std::string msg = load_error(s, lo);
      CHECK_MESSAGE(msg.find("truncated") != std::string::npos, msg);
      CHECK_MESSAGE(msg.find(path) != std::string::npos, msg);
    }
  }
}

TEST_CASE("bad load options and file systems without O_DIRECT get one clear error") {
  CHECK(load::parse_io_engine("uring", "--io") == IoEngine::Uring);
  CHECK(load::parse_io_engine("pread", "--io") == IoEngine::Pread);
  CHECK_THROWS_WITH_AS(load::parse_io_engine("aio", "--io"), doctest::Contains("aio"), Error);
  ShardReader s(test::write_shard(dir() + "/opts.tps", test::make_tensors(), Codec::None));
  LoadOptions tiny;
  tiny.ring_buffer_bytes = 1024;
  CHECK(load_error(s, tiny).find("16 KiB") != std::string::npos);
  if (std::filesystem::exists("/dev/shm")) {
    const std::string shm = "/dev/shm/tpshard_load_test_" + std::to_string(getpid()) + ".tps";
    std::filesystem::copy_file(s.path(), shm, std::filesystem::copy_options::overwrite_existing);
    ShardReader t(shm);
    LoadOptions d;
    d.direct_io = true;
    const std::string msg = load_error(t, d);
    std::filesystem::remove(shm);
    if (!msg.empty()) {  // tmpfs: O_DIRECT refused, by name
      CHECK_MESSAGE(msg.find("O_DIRECT") != std::string::npos, msg);
      CHECK_MESSAGE(msg.find(shm) != std::string::npos, msg);
    }
  }
}
