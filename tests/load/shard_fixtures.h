// shard_fixtures.h: small shard files for the loader tests (tests/load on the host target,
// tests/gpu/test_weight_arena.cpp on the device): tensors of awkward sizes written by ShardWriter,
// byte flips and file reads to check what the loader put where.
#pragma once
#include <doctest/doctest.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "format/dtype.h"
#include "format/shard_file.h"

namespace tpshard::test {

/// A fresh directory per process under base (the system temp directory when empty), removed with its
/// files when the process exits.
inline std::string shard_temp_dir(const std::string& base = {}) {
  struct RemoveAtExit {
    std::filesystem::path dir;
    ~RemoveAtExit() {
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
    }
  };
  auto root = base.empty() ? std::filesystem::temp_directory_path() : std::filesystem::path(base);
  auto d = root / ("tpshard_load_test_" + std::to_string(getpid()));
  std::filesystem::create_directories(d);
  static RemoveAtExit remove_at_exit{d};
  return d.string();
}

struct TestTensor {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

/// Tensors of awkward sizes (not multiples of 4096 or of the ring chunk), some larger than small ring
/// buffers, bf16 data that compresses (repeating) and data that does not (pseudo-random). `scale`
/// multiplies the two large tensors' first dimension.
inline std::vector<TestTensor> make_tensors(int scale = 1) {
  std::vector<TestTensor> ts;
  auto add = [&](const std::string& name, DType dt, std::vector<int64_t> shape, int pattern) {
    TestTensor t{name, dt, shape, {}};
    size_t n = dtype_size(dt);
    for (auto d : shape) n *= size_t(d);
    t.bytes.resize(n);
    uint32_t x = 12345u + uint32_t(pattern);
    for (size_t i = 0; i < n; ++i) {
      if (pattern % 2 == 0) {
        x = x * 1664525u + 1013904223u;  // LCG: incompressible
        t.bytes[i] = uint8_t(x >> 24);
      } else {
        t.bytes[i] = uint8_t((i * 7 + size_t(pattern)) % 251 & (i % 2 ? 0x0f : 0xff));  // compressible
      }
    }
    ts.push_back(std::move(t));
  };
  add("token_embd.weight", DType::BF16, {1000 * scale, 300}, 1);   // 600000 x scale bytes
  add("blk.0.attn_norm.weight", DType::F32, {300}, 2);            // 1200 bytes
  add("blk.0.attn_qkv.weight", DType::F16, {900, 300}, 3);         // 540000
  add("blk.0.attn_output.weight", DType::F16, {300, 301}, 4);      // odd element count
  add("blk.0.ffn_up.bias", DType::F32, {1}, 5);                    // 4 bytes
  add("output.weight", DType::BF16, {1000 * scale, 300}, 6);       // incompressible, large
  return ts;
}

inline std::string write_shard(const std::string& path, const std::vector<TestTensor>& ts, Codec codec) {
  ShardWriter w(path, 0, 1);
  std::vector<TensorRecord> recs;
  for (const auto& t : ts) {
    TensorRecord r;
    r.name = t.name;
    r.dtype = t.dtype;
    r.global_shape = t.shape;
    r.local_shape = t.shape;
    r.codec = codec;
    recs.push_back(r);
  }
  w.declare(recs);
  for (size_t i = 0; i < ts.size(); ++i) w.write(i, ts[i].bytes.data(), ts[i].bytes.size());
  w.finish();
  return path;
}

inline std::vector<uint8_t> read_file_range(const std::string& path, uint64_t off, uint64_t n) {
  std::vector<uint8_t> v(n);
  std::ifstream f(path, std::ios::binary);
  f.seekg(std::streamoff(off));
  f.read(reinterpret_cast<char*>(v.data()), std::streamsize(n));
  REQUIRE(uint64_t(f.gcount()) == n);
  return v;
}

/// XORs one byte of the file at `at` with 0x40.
inline void flip_byte(const std::string& path, uint64_t at) {
  int fd = open(path.c_str(), O_RDWR);
  REQUIRE(fd >= 0);
  uint8_t b = 0;
  REQUIRE(pread(fd, &b, 1, off_t(at)) == 1);
  b ^= 0x40;
  REQUIRE(pwrite(fd, &b, 1, off_t(at)) == 1);
  close(fd);
}

}  // namespace tpshard::test
