// shard_writer.cpp: ShardWriter, which lays out and writes one *.tps shard file (docs/FORMAT.md).
// Offsets: arena offsets are assigned in declaration order at 4096-byte alignment. A file without
// compressed tensors has file offset == arena offset (so the data section is the arena image); a file
// with compressed tensors stores every tensor back to back (4096-aligned) in index order.
#include <fcntl.h>
#include <unistd.h>
#include <zstd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <unordered_set>

#include "format/error.h"
#include "format/hash.h"
#include "format/shard_file.h"
#include "format/shard_layout.h"

namespace tpshard {

using namespace layout;

namespace {

void pwrite_all(int fd, const void* src, size_t n, uint64_t offset, const std::string& path) {
  const auto* p = static_cast<const uint8_t*>(src);
  size_t done = 0;
  while (done < n) {
    const ssize_t put = ::pwrite(fd, p + done, n - done, static_cast<off_t>(offset + done));
    if (put < 0 && errno == EINTR) continue;
    if (put < 0) {
      const int e = errno;
      throw Error(path + ": write failed: " + std::strerror(e),
                  e == ENOSPC || e == EDQUOT ? "the disk is full: free space or write to another directory with -o"
                                             : "check that the output directory is writable");
    }
    done += static_cast<size_t>(put);
  }
}

uint64_t record_bytes(const TensorRecord& r) { return 2 + r.name.size() + 4 + 4 + 16 * r.local_shape.size() + 40; }

}  // namespace

struct TensorState {
  bool active = false, done = false;
  int pass = 0;
  uint64_t fed = 0;       // raw bytes fed in this pass
  uint64_t stored = 0;    // stored bytes written so far
  Xxh3Stream hash;
  ZSTD_CCtx* cctx = nullptr;
  std::vector<uint8_t> out, plane;
  ~TensorState() {
    if (cctx) ZSTD_freeCCtx(cctx);
  }
};

struct ShardWriter::Impl {
  std::string path;
  int fd = -1;
  uint32_t tp_rank = 0, tp_size = 1;
  int zstd_level = 3;
  bool declared = false, finished = false, sequential = false;
  uint64_t table_bytes = 0, data_offset = 0, arena_bytes = 0;
  uint64_t seq_cursor = 0;  // sequential layout: next free data offset
  size_t seq_next = 0;      // sequential layout: index that may be written next
  std::mutex mu;
  std::vector<std::unique_ptr<TensorState>> st;
};

ShardWriter::ShardWriter(const std::string& path, uint32_t tp_rank, uint32_t tp_size) : impl_(std::make_unique<Impl>()) {
  impl_->path = path;
  impl_->tp_rank = tp_rank;
  impl_->tp_size = tp_size;
  if (tp_size == 0 || tp_rank >= tp_size) throw Error(path + ": tp_rank must be below tp_size", "");
  impl_->fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (impl_->fd < 0)
    throw Error(path + ": cannot create shard file: " + std::strerror(errno), "check that the output directory is writable (-o)");
}

ShardWriter::~ShardWriter() {
  if (!impl_->finished) abandon();
}

void ShardWriter::abandon() {
  if (impl_->fd >= 0) {
    ::close(impl_->fd);
    impl_->fd = -1;
    ::unlink(impl_->path.c_str());
  }
}

void ShardWriter::set_zstd_level(int level) { impl_->zstd_level = level; }

void ShardWriter::declare(std::vector<TensorRecord> records) {
  Impl& I = *impl_;
  if (I.declared) throw Error(I.path + ": ShardWriter::declare called twice", "");
  std::unordered_set<std::string> names;
  uint64_t arena = 0, table = 0;
  for (auto& r : records) {
    if (r.name.empty() || r.name.size() > kMaxNameBytes || !names.insert(r.name).second)
      throw Error(I.path + ": tensor name '" + r.name + "' is empty, too long or duplicated", "");
    if (r.local_shape.empty() || r.local_shape.size() > kMaxDims || r.global_shape.size() != r.local_shape.size())
      throw Error(I.path + ": tensor " + r.name + " has a bad shape", "");
    uint64_t n = 1;
    for (int64_t d : r.local_shape) n *= static_cast<uint64_t>(d);
    r.raw_bytes = n * dtype_size(r.dtype);
    if (r.codec == Codec::ZstdBytePlanes && dtype_size(r.dtype) != 2) r.codec = Codec::Zstd;
    if (r.codec != Codec::None) I.sequential = true;
    r.arena_offset = arena;
    arena = align_up(arena + r.raw_bytes, kDataAlignment);
    table += record_bytes(r);
  }
  I.arena_bytes = arena;
  I.table_bytes = table;
  I.data_offset = align_up(kHeaderBytes + table, kDataAlignment);
  for (auto& r : records) {
    if (!I.sequential) {
      r.file_offset = r.arena_offset;
      r.stored_bytes = r.raw_bytes;
    }
    I.st.push_back(std::make_unique<TensorState>());
  }
  records_ = std::move(records);
  I.declared = true;
}

int ShardWriter::passes(size_t index) const { return records_.at(index).codec == Codec::ZstdBytePlanes ? 2 : 1; }

void ShardWriter::begin_tensor(size_t index) {
  Impl& I = *impl_;
  if (!I.declared || index >= records_.size()) throw Error(I.path + ": begin_tensor on an undeclared tensor", "");
  TensorState& s = *I.st[index];
  if (s.active || s.done) throw Error(I.path + ": tensor " + records_[index].name + " written twice", "");
  TensorRecord& r = records_[index];
  if (I.sequential) {
    std::lock_guard<std::mutex> lock(I.mu);
    if (index != I.seq_next)
      throw Error(I.path + ": tensor " + r.name + " written out of order (files with compressed tensors are written in index order)", "");
    r.file_offset = I.seq_cursor;
  }
  if (r.codec != Codec::None) {
    s.cctx = ZSTD_createCCtx();
    if (!s.cctx) throw Error("ZSTD_createCCtx failed: out of memory", "");
    ZSTD_CCtx_setParameter(s.cctx, ZSTD_c_compressionLevel, I.zstd_level);
    ZSTD_CCtx_setPledgedSrcSize(s.cctx, r.raw_bytes);
    s.out.resize(ZSTD_CStreamOutSize());
  }
  s.active = true;
}

namespace {

/// Feed `in` to the zstd stream; write produced bytes at base + s.stored and hash them.
void zstd_feed(TensorState& s, const void* in, size_t n, ZSTD_EndDirective mode, int fd, uint64_t base,
               const std::string& path, const std::string& name) {
  ZSTD_inBuffer ib{in, n, 0};
  for (;;) {
    ZSTD_outBuffer ob{s.out.data(), s.out.size(), 0};
    const size_t rc = ZSTD_compressStream2(s.cctx, &ob, &ib, mode);
    if (ZSTD_isError(rc)) throw Error(path + ": compressing tensor " + name + " failed: " + ZSTD_getErrorName(rc), "");
    if (ob.pos) {
      pwrite_all(fd, s.out.data(), ob.pos, base + s.stored, path);
      s.hash.update(s.out.data(), ob.pos);
      s.stored += ob.pos;
    }
    const bool finished = mode == ZSTD_e_end ? rc == 0 : ib.pos == ib.size;
    if (finished) break;
  }
}

}  // namespace

void ShardWriter::append(size_t index, const void* raw, size_t n) {
  Impl& I = *impl_;
  TensorState& s = *I.st.at(index);
  const TensorRecord& r = records_[index];
  if (!s.active) throw Error(I.path + ": append to tensor " + r.name + " before begin_tensor", "");
  if (s.fed + n > r.raw_bytes)
    throw Error(I.path + ": tensor " + r.name + " given more than its " + std::to_string(r.raw_bytes) + " bytes", "");
  const uint64_t base = I.data_offset + r.file_offset;
  if (r.codec == Codec::None) {
    pwrite_all(I.fd, raw, n, base + s.fed, I.path);
    s.hash.update(raw, n);
    s.stored += n;
  } else if (r.codec == Codec::Zstd) {
    zstd_feed(s, raw, n, ZSTD_e_continue, I.fd, base, I.path, r.name);
  } else {
    if (n % 2) throw Error(I.path + ": tensor " + r.name + ": byte-plane chunks must hold whole elements", "");
    s.plane.resize(n / 2);
    const auto* p = static_cast<const uint8_t*>(raw);
    for (size_t i = 0; i < n / 2; ++i) s.plane[i] = p[2 * i + s.pass];
    zstd_feed(s, s.plane.data(), s.plane.size(), ZSTD_e_continue, I.fd, base, I.path, r.name);
  }
  s.fed += n;
}

void ShardWriter::next_pass(size_t index) {
  TensorState& s = *impl_->st.at(index);
  const TensorRecord& r = records_[index];
  if (s.fed != r.raw_bytes)
    throw Error(impl_->path + ": tensor " + r.name + " got " + std::to_string(s.fed) + " of " + std::to_string(r.raw_bytes) + " bytes", "");
  ++s.pass;
  s.fed = 0;
}

void ShardWriter::end_tensor(size_t index) {
  Impl& I = *impl_;
  TensorState& s = *I.st.at(index);
  TensorRecord& r = records_[index];
  if (!s.active || s.pass != passes(index))
    throw Error(I.path + ": tensor " + r.name + " ended before all passes were written", "");
  if (r.codec != Codec::None) {
    zstd_feed(s, nullptr, 0, ZSTD_e_end, I.fd, I.data_offset + r.file_offset, I.path, r.name);
    ZSTD_freeCCtx(s.cctx);
    s.cctx = nullptr;
    s.out = {};
    s.plane = {};
  }
  r.stored_bytes = s.stored;
  r.xxh3 = s.hash.digest();
  s.active = false;
  s.done = true;
  if (I.sequential) {
    std::lock_guard<std::mutex> lock(I.mu);
    I.seq_cursor = align_up(r.file_offset + r.stored_bytes, kDataAlignment);
    ++I.seq_next;
  }
}

void ShardWriter::write(size_t index, const void* raw, size_t raw_bytes) {
  begin_tensor(index);
  for (int p = 0; p < passes(index); ++p) {
    append(index, raw, raw_bytes);
    next_pass(index);
  }
  end_tensor(index);
}

void ShardWriter::finish() {
  Impl& I = *impl_;
  if (!I.declared) throw Error(I.path + ": finish() before declare()", "");
  uint64_t data_end = 0;
  for (size_t i = 0; i < records_.size(); ++i) {
    if (!I.st[i]->done) throw Error(I.path + ": tensor " + records_[i].name + " was declared but never written", "");
    data_end = std::max(data_end, records_[i].file_offset + records_[i].stored_bytes);
  }
  const uint64_t data_bytes = align_up(data_end, kDataAlignment);
  std::string table;
  table.reserve(I.table_bytes);
  for (const auto& r : records_) {
    put_u16(table, static_cast<uint16_t>(r.name.size()));
    table += r.name;
    put_u8(table, static_cast<uint8_t>(r.dtype));
    put_u8(table, static_cast<uint8_t>(r.split));
    put_u8(table, static_cast<uint8_t>(r.codec));
    put_u8(table, static_cast<uint8_t>(r.local_shape.size()));
    put_u32(table, static_cast<uint32_t>(r.split_axis));
    for (int64_t d : r.global_shape) put_u64(table, static_cast<uint64_t>(d));
    for (int64_t d : r.local_shape) put_u64(table, static_cast<uint64_t>(d));
    put_u64(table, r.file_offset);
    put_u64(table, r.stored_bytes);
    put_u64(table, r.arena_offset);
    put_u64(table, r.raw_bytes);
    put_u64(table, r.xxh3);
  }
  std::string head(reinterpret_cast<const char*>(kMagic), 8);
  put_u32(head, kVersion);
  put_u32(head, I.tp_rank);
  put_u32(head, I.tp_size);
  put_u32(head, static_cast<uint32_t>(records_.size()));
  put_u64(head, kHeaderBytes);
  put_u64(head, table.size());
  put_u64(head, I.data_offset);
  put_u64(head, data_bytes);
  put_u64(head, I.arena_bytes);
  put_u64(head, xxh3_64(table.data(), table.size()));
  put_u64(head, 0);
  head += table;
  head.resize(static_cast<size_t>(I.data_offset), '\0');
  pwrite_all(I.fd, head.data(), head.size(), 0, I.path);
  if (::ftruncate(I.fd, static_cast<off_t>(I.data_offset + data_bytes)) != 0)
    throw Error(I.path + ": ftruncate failed: " + std::strerror(errno), "the disk may be full: free space or use another -o");
  if (::fsync(I.fd) != 0) throw Error(I.path + ": fsync failed: " + std::strerror(errno), "the disk may be full or failing");
  if (::close(I.fd) != 0) {
    I.fd = -1;
    throw Error(I.path + ": close failed: " + std::strerror(errno), "the disk may be full");
  }
  I.fd = -1;
  I.finished = true;
}

}  // namespace tpshard
