// test_shard_file.cpp: ShardWriter -> ShardReader round trips (all codecs, streaming writes) and the
// reader's rejection of corrupt files (crafted by patching valid files; the table hash is recomputed
// so the field checks themselves are exercised).
#include <doctest/doctest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <random>

#include "format/error.h"
#include "format/hash.h"
#include "format/shard_file.h"
#include "format/safetensors.h"
#include "format/shard_layout.h"
#include "test_util.h"

using namespace tpshard;
using namespace tpshard::test;

namespace {

TensorRecord rec(const std::string& name, DType dt, std::vector<int64_t> local, SplitKind split, int axis, int tp, Codec codec) {
  TensorRecord r;
  r.name = name;
  r.dtype = dt;
  r.local_shape = local;
  r.global_shape = local;
  if (axis >= 0) r.global_shape[axis] *= tp;
  r.split = split;
  r.split_axis = axis;
  r.codec = codec;
  return r;
}

std::vector<uint8_t> bytes_of(const std::vector<float>& v, DType dt) {
  std::vector<uint8_t> out(v.size() * dtype_size(dt));
  convert_elements(v.data(), DType::F32, out.data(), dt, v.size(), "t");
  return out;
}

/// Writes a 3-tensor file and returns the raw bytes written per tensor.
std::vector<std::vector<uint8_t>> write_sample(const std::string& path, Codec codec, uint32_t rank = 1, uint32_t tp = 2) {
  std::mt19937 rng(42);
  std::uniform_real_distribution<float> u(-2, 2);
  ShardWriter w(path, rank, tp);
  w.declare({rec("token_embd.weight", DType::BF16, {50, 64}, SplitKind::Vocab, 0, tp, codec),
             rec("blk.0.attn_norm.weight", DType::F32, {64}, SplitKind::Replicated, -1, tp, Codec::None),
             rec("blk.0.attn_output.weight", DType::F16, {64, 32}, SplitKind::Row, 1, tp, codec)});
  std::vector<std::vector<uint8_t>> raw;
  for (size_t i = 0; i < 3; ++i) {
    std::vector<float> v(w.records()[i].raw_bytes / dtype_size(w.records()[i].dtype));
    for (auto& x : v) x = u(rng);
    raw.push_back(bytes_of(v, w.records()[i].dtype));
  }
  // Tensor 0 streamed in odd-sized (element-aligned) chunks, the others in one call.
  w.begin_tensor(0);
  for (int p = 0; p < w.passes(0); ++p) {
    for (size_t off = 0; off < raw[0].size(); off += 998) w.append(0, raw[0].data() + off, std::min<size_t>(998, raw[0].size() - off));
    w.next_pass(0);
  }
  w.end_tensor(0);
  w.write(1, raw[1].data(), raw[1].size());
  w.write(2, raw[2].data(), raw[2].size());
  w.finish();
  return raw;
}

std::vector<uint8_t> slurp(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}
void spit(const std::string& p, const std::vector<uint8_t>& b) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}
/// Recompute the header's table hash after patching the table.
void rehash_table(std::vector<uint8_t>& b) {
  uint64_t tb;
  std::memcpy(&tb, b.data() + layout::kOffTableBytes, 8);
  const uint64_t h = xxh3_64(b.data() + layout::kHeaderBytes, tb);
  std::memcpy(b.data() + layout::kOffTableXxh3, &h, 8);
}
/// Offset of the fixed part (after the name) of record i.
size_t record_fixed(const std::vector<uint8_t>& b, int i) {
  size_t p = layout::kHeaderBytes;
  for (int k = 0;; ++k) {
    uint16_t nl;
    std::memcpy(&nl, b.data() + p, 2);
    const size_t fixed = p + 2 + nl;
    if (k == i) return fixed;
    const uint8_t nd = b[fixed + 3];
    p = fixed + 8 + 16 * nd + 40;
  }
}
std::string reader_error(const std::string& path) {
  try {
    ShardReader r(path);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("shard round trip for every codec; layout invariants") {
  ScratchDir d;
  for (Codec codec : {Codec::None, Codec::Zstd, Codec::ZstdBytePlanes}) {
    CAPTURE(static_cast<int>(codec));
    const std::string path = d / "s.tps";
    const auto raw = write_sample(path, codec);
    ShardReader r(path);
    CHECK(r.header().tp_rank == 1);
    CHECK(r.header().tp_size == 2);
    CHECK(r.header().data_offset % 4096 == 0);
    REQUIRE(r.tensors().size() == 3);
    const TensorRecord& e = r.at("token_embd.weight");
    CHECK(e.global_shape == std::vector<int64_t>{100, 64});
    CHECK(e.local_shape == std::vector<int64_t>{50, 64});
    CHECK(e.split == SplitKind::Vocab);
    CHECK(e.codec == codec);
    CHECK(r.at("blk.0.attn_output.weight").global_shape == std::vector<int64_t>{64, 64});
    CHECK(r.at("blk.0.attn_output.weight").split_axis == 1);
    CHECK(r.find("nope") == nullptr);
    CHECK_THROWS_WITH_AS(r.at("nope"), doctest::Contains("tensor nope is missing"), Error);
    uint64_t arena = 0;
    for (size_t i = 0; i < 3; ++i) {
      const TensorRecord& t = r.tensors()[i];
      CHECK(t.arena_offset == arena);
      arena = layout::align_up(t.arena_offset + t.raw_bytes, 4096);
      if (codec == Codec::None) CHECK(t.file_offset == t.arena_offset);
      std::vector<uint8_t> got(t.raw_bytes);
      r.read_tensor(t, got.data());
      CHECK(got == raw[i]);
      CHECK(r.hash_stored(t) == t.xxh3);
    }
    CHECK(r.header().arena_bytes == arena);
    if (codec == Codec::None) CHECK(r.header().data_bytes == arena);
    CHECK(r.file_bytes() == r.header().data_offset + r.header().data_bytes);
    const auto f = r.read_tensor_f32("blk.0.attn_norm.weight");
    CHECK(f.size() == 64);
  }
}

TEST_CASE("a flipped data byte is caught by read_tensor and hash_stored") {
  ScratchDir d;
  const std::string path = d / "s.tps";
  write_sample(path, Codec::None);
  uint64_t off;
  {
    ShardReader r(path);
    off = r.header().data_offset + r.at("blk.0.attn_output.weight").file_offset + 17;
  }
  auto b = slurp(path);
  b[off] ^= 0x01;
  spit(path, b);
  ShardReader r(path);
  const TensorRecord& t = r.at("blk.0.attn_output.weight");
  std::vector<uint8_t> dst(t.raw_bytes);
  CHECK_THROWS_WITH_AS(r.read_tensor(t, dst.data()), doctest::Contains("tensor blk.0.attn_output.weight: checksum mismatch"), Error);
  CHECK(r.hash_stored(t) != t.xxh3);
  CHECK(r.hash_stored(r.at("token_embd.weight")) == r.at("token_embd.weight").xxh3);
}

TEST_CASE("corrupt shard files are rejected with a specific message") {
  ScratchDir d;
  const std::string good = d / "good.tps", bad = d / "bad.tps";
  write_sample(good, Codec::None);
  const auto base = slurp(good);
  auto patch = [&](auto fn) {
    auto b = base;
    fn(b);
    spit(bad, b);
    return reader_error(bad);
  };
  CHECK(patch([](auto& b) { b.resize(40); }).find("smaller than the 80-byte header") != std::string::npos);
  CHECK(patch([](auto& b) { b[1] = 'X'; }).find("bad magic") != std::string::npos);
  CHECK(patch([](auto& b) { b[layout::kOffVersion] = 2; }).find("version 2 is not supported (this build reads version 1): "
                                                                 "written by a newer tpshard") != std::string::npos);
  CHECK(patch([](auto& b) { std::memset(b.data() + layout::kOffVersion, 0xff, 4); })
            .find("the header's format version field holds 4294967295, not a format version (this build reads version 1): "
                  "the file is corrupt") != std::string::npos);
  CHECK(patch([](auto& b) { b.resize(b.size() - 4096); }).find("but the header says") != std::string::npos);
  CHECK(patch([](auto& b) { b[layout::kOffTpRank] = 5; }).find("tp_rank 5 is not below tp_size 2") != std::string::npos);
  CHECK(patch([](auto& b) { b[layout::kHeaderBytes + 5] ^= 1; }).find("table checksum mismatch") != std::string::npos);
  CHECK(patch([](auto& b) { b[layout::kOffTableBytes + 6] = 1; }).find("extends beyond the file") != std::string::npos);
  CHECK(patch([](auto& b) {
          const uint32_t n = 1000000;
          std::memcpy(b.data() + layout::kOffCount, &n, 4);
        }).find("cannot fit") != std::string::npos);
  // Field checks (table hash recomputed so that they, not the hash, fire).
  CHECK(patch([&](auto& b) {
          b[record_fixed(b, 1) + 0] = 9;  // dtype
          rehash_table(b);
        }).find("unknown dtype code 9") != std::string::npos);
  CHECK(patch([&](auto& b) {
          b[record_fixed(b, 1) + 2] = 7;  // codec
          rehash_table(b);
        }).find("unknown codec 7") != std::string::npos);
  CHECK(patch([&](auto& b) {
          b[record_fixed(b, 0) + 1] = 0;  // split -> replicated while axis is 0
          rehash_table(b);
        }).find("does not fit split kind replicated") != std::string::npos);
  CHECK(patch([&](auto& b) {
          // local shape of tensor 0 (2 dims): [50, 64] -> [101, 64], more than its global 100 rows
          b[record_fixed(b, 0) + 8 + 16] = 101;
          rehash_table(b);
        }).find("global and local shapes disagree") != std::string::npos);
  CHECK(patch([&](auto& b) {
          // raw_bytes of tensor 1 (1 dim) += 4
          const size_t at = record_fixed(b, 1) + 8 + 16 + 24;
          b[at] += 4;
          rehash_table(b);
        }).find("raw_bytes") != std::string::npos);
  CHECK(patch([&](auto& b) {
          // tensor 1 (1 dim) marked zstd with stored_bytes 0: nothing would be streamed into its arena bytes
          b[record_fixed(b, 1) + 2] = 1;
          std::memset(b.data() + record_fixed(b, 1) + 8 + 16 + 8, 0, 8);
          rehash_table(b);
        }).find("a compressed tensor with no stored bytes") != std::string::npos);
  CHECK(patch([&](auto& b) {
          // file_offset of tensor 2 = file_offset of tensor 1: overlap
          const size_t f1 = record_fixed(b, 1) + 8 + 16, f2 = record_fixed(b, 2) + 8 + 32;
          std::memcpy(b.data() + f2, b.data() + f1, 8);
          std::memcpy(b.data() + f2 + 16, b.data() + f1 + 16, 8);
          rehash_table(b);
        }).find("overlaps the previous tensor") != std::string::npos);
  CHECK(patch([&](auto& b) {
          const size_t f2 = record_fixed(b, 2) + 8 + 32;
          const uint64_t far = 1ull << 40;
          std::memcpy(b.data() + f2, &far, 8);
          rehash_table(b);
        }).find("outside the data section") != std::string::npos);
  CHECK(patch([&](auto& b) {
          const size_t f2 = record_fixed(b, 2) + 8 + 32;
          b[f2] = 8;  // misaligned offset
          rehash_table(b);
        }).find("not 4096-aligned") != std::string::npos);
  CHECK(reader_error(d / "missing.tps").find("cannot open shard file") != std::string::npos);
  // not a regular file: named as such (a FIFO must not block the open)
  std::filesystem::create_directories(d / "dir.tps");
  CHECK(reader_error(d / "dir.tps") == (d / "dir.tps") + ": not a regular file (a directory)");
  REQUIRE(::mkfifo((d / "fifo.tps").c_str(), 0600) == 0);
  CHECK(reader_error(d / "fifo.tps") == (d / "fifo.tps") + ": not a regular file (a device, FIFO or socket)");
  try {  // the hint of a missing shard says the directory is incomplete (not "check the directory")
    ShardReader r(d / "missing.tps");
    FAIL("opened a missing shard");
  } catch (const Error& e) {
    CHECK(std::string(e.hint()).find("the model directory is incomplete") != std::string::npos);
  }
}

TEST_CASE("duplicate tensor names are rejected by writer and reader") {
  ScratchDir d;
  ShardWriter w(d / "dup.tps", 0, 1);
  CHECK_THROWS_AS(w.declare({rec("a", DType::F32, {4}, SplitKind::Replicated, -1, 1, Codec::None),
                             rec("a", DType::F32, {4}, SplitKind::Replicated, -1, 1, Codec::None)}),
                  Error);
  // Reader: write two tensors "ab" and "cd", then rename the second to "ab".
  const std::string path = d / "two.tps";
  {
    ShardWriter v(path, 0, 1);
    v.declare({rec("ab", DType::F32, {4}, SplitKind::Replicated, -1, 1, Codec::None),
               rec("cd", DType::F32, {4}, SplitKind::Replicated, -1, 1, Codec::None)});
    const float x[4] = {1, 2, 3, 4};
    v.write(0, x, 16);
    v.write(1, x, 16);
    v.finish();
  }
  auto b = slurp(path);
  const size_t name1 = record_fixed(b, 0) + 8 + 16 + 40 + 2;
  b[name1] = 'a';
  b[name1 + 1] = 'b';
  rehash_table(b);
  spit(path, b);
  CHECK(reader_error(path).find("tensor ab appears twice") != std::string::npos);
}

TEST_CASE("writer misuse is reported") {
  ScratchDir d;
  ShardWriter w(d / "m.tps", 0, 1);
  w.declare({rec("a", DType::F32, {4}, SplitKind::Replicated, -1, 1, Codec::Zstd),
             rec("b", DType::F32, {4}, SplitKind::Replicated, -1, 1, Codec::Zstd)});
  const float x[4] = {1, 2, 3, 4};
  CHECK_THROWS_WITH_AS(w.write(1, x, 16), doctest::Contains("out of order"), Error);
  w.begin_tensor(0);
  CHECK_THROWS_WITH_AS(w.append(0, x, 32), doctest::Contains("more than its 16 bytes"), Error);
  w.append(0, x, 8);
  CHECK_THROWS_AS(w.next_pass(0), Error);
  CHECK_THROWS_WITH_AS(w.finish(), doctest::Contains("never written"), Error);
}

TEST_CASE("mutation fuzz: every single-byte change of header/table either loads or throws Error") {
  ScratchDir d;
  const std::string good = d / "good.tps", bad = d / "bad.tps";
  write_sample(good, Codec::Zstd);
  const auto base = slurp(good);
  uint64_t table_bytes;
  std::memcpy(&table_bytes, base.data() + layout::kOffTableBytes, 8);
  const size_t end = layout::kHeaderBytes + static_cast<size_t>(table_bytes);
  std::mt19937 rng(7);
  size_t rejected = 0, accepted = 0;
  for (size_t pos = 0; pos < end; ++pos) {
    for (int trial = 0; trial < 2; ++trial) {
      auto b = base;
      b[pos] = static_cast<uint8_t>(trial == 0 ? b[pos] ^ 0xff : rng());
      if (pos >= layout::kHeaderBytes) rehash_table(b);  // let the field checks see the change
      spit(bad, b);
      try {
        ShardReader r(bad);
        // Accepted files must still read safely (hash or zstd errors are Errors too).
        for (const auto& t : r.tensors()) {
          std::vector<uint8_t> buf(t.raw_bytes);
          try {
            r.read_tensor(t, buf.data());
          } catch (const Error&) {
          }
        }
        ++accepted;
      } catch (const Error&) {
        ++rejected;
      }
    }
  }
  CHECK(rejected > accepted);  // most single-byte changes are detected
}

TEST_CASE("mutation fuzz: safetensors header bytes") {
  ScratchDir d;
  std::mt19937 rng(3);
  std::map<std::string, StEntry> t;
  t["a"] = random_entry(rng, DType::BF16, {4, 8});
  t["b"] = random_entry(rng, DType::F32, {3});
  write_safetensors(d / "ok.safetensors", t);
  const auto base = slurp(d / "ok.safetensors");
  uint64_t n;
  std::memcpy(&n, base.data(), 8);
  for (size_t pos = 0; pos < 8 + n; ++pos) {
    auto b = base;
    b[pos] = static_cast<uint8_t>(rng());
    spit(d / "bad.safetensors", b);
    try {
      SafetensorsFile f(d / "bad.safetensors");
      for (const auto& [name, e] : f.tensors()) CHECK(e.file_offset + e.bytes <= f.size());
    } catch (const Error&) {
    }
  }
}

TEST_CASE("XXH3: every implementation this CPU runs gives libxxhash's values, one-shot and streamed in odd pieces") {
  // Sizes around XXH3's internal boundaries (16, 128, 240 bytes, 1 KiB stripes, 64 KiB-ish blocks).
  std::vector<uint8_t> data(3u << 20);
  uint32_t x = 12345;
  for (uint8_t& b : data) b = static_cast<uint8_t>((x = x * 1664525u + 1013904223u) >> 24);
  const std::vector<size_t> sizes = {0, 1, 3, 16, 17, 128, 129, 240, 241, 1024, 1025, 65535, 1000003, data.size()};
  set_xxh3_implementation("sse2");  // the library itself
  std::vector<uint64_t> want;
  for (size_t n : sizes) want.push_back(xxh3_64(data.data(), n));
  CHECK(want[0] == 0x2d06800538d394c2ull);  // XXH3-64 of the empty input (xxHash's published value)
  int tried = 0;
  for (const char* name : {"sse2", "avx2", "avx512"}) {
    try {
      set_xxh3_implementation(name);
    } catch (const Error&) {
      continue;  // not on this CPU
    }
    ++tried;
    CAPTURE(name);
    CHECK(std::string(xxh3_implementation()) == name);
    for (size_t i = 0; i < sizes.size(); ++i) {
      CAPTURE(sizes[i]);
      CHECK(xxh3_64(data.data(), sizes[i]) == want[i]);
      Xxh3Stream s;
      size_t done = 0, piece = 1;
      while (done < sizes[i]) {
        const size_t m = std::min(piece, sizes[i] - done);
        s.update(data.data() + done, m);
        done += m;
        piece = piece * 3 + 7;
      }
      CHECK(s.digest() == want[i]);
      s.reset();
      s.update(data.data(), sizes[i]);
      CHECK(s.digest() == want[i]);
    }
  }
  CHECK(tried >= 1);
  CHECK_THROWS_WITH_AS(set_xxh3_implementation("avx9000"), doctest::Contains("is not available"), Error);
  set_xxh3_implementation("auto");
}
