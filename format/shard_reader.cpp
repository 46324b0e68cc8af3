// shard_reader.cpp: ShardReader, the validating reader of *.tps shard files (docs/FORMAT.md).
// Every size, count and offset in the file is untrusted: each is checked against the file size with
// overflow-safe arithmetic before use. Also split_kind_name.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <unordered_set>

#include "format/error.h"
#include "format/hash.h"
#include "format/shard_file.h"
#include "format/shard_layout.h"

namespace tpshard {

using namespace layout;

const char* split_kind_name(SplitKind k) {
  switch (k) {
    case SplitKind::Replicated: return "replicated";
    case SplitKind::Column: return "column";
    case SplitKind::Row: return "row";
    case SplitKind::Vocab: return "vocab";
  }
  return "unknown";
}

namespace {

const char* kCorruptHint = "the shard file is corrupt or truncated: run `tpshard verify` and re-run tpshard convert";

void pread_all(int fd, void* dst, uint64_t n, uint64_t offset, const std::string& path, const std::string& what) {
  auto* p = static_cast<uint8_t*>(dst);
  uint64_t done = 0;
  while (done < n) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(n - done, 1u << 30));
    const ssize_t got = ::pread(fd, p + done, want, static_cast<off_t>(offset + done));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) throw Error(path + ": reading " + what + " failed: " + std::strerror(errno), "check the disk");
    if (got == 0) throw Error(path + ": file ends while reading " + what, kCorruptHint);
    done += static_cast<uint64_t>(got);
  }
}

/// Cursor over the table bytes; every read is bounds-checked.
struct TableCursor {
  const uint8_t* p;
  uint64_t size;
  uint64_t pos = 0;
  const std::string& path;
  const uint8_t* take(uint64_t n) {
    if (n > size - pos) throw Error(path + ": tensor table entry runs past the table end", kCorruptHint);
    const uint8_t* r = p + pos;
    pos += n;
    return r;
  }
  template <typename T>
  T get() {
    return get_le<T>(take(sizeof(T)));
  }
};

}  // namespace

ShardReader::ShardReader(const std::string& path) : path_(path) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);  // O_NONBLOCK: a FIFO must not block the open
  if (fd_ < 0) {
    const int err = errno;
    throw Error(
        path + ": cannot open shard file: " + std::strerror(err),
        err == ENOENT
            ? "the model directory is incomplete: copy it again from where it was converted, or re-run "
              "tpshard convert"
        : err == EACCES
            ? "make the model directory readable for this user (chmod -R a+rX DIR), or run as its owner"
            : "check the model directory and the disk");
  }
  try {
    struct stat st {};
    if (::fstat(fd_, &st) != 0) throw Error(path + ": fstat failed: " + std::strerror(errno), "");
    if (!S_ISREG(st.st_mode))
      throw Error(path + ": not a regular file (" + (S_ISDIR(st.st_mode) ? "a directory" : "a device, FIFO or socket") + ")",
                  "the model directory is damaged: copy it again from where it was converted, or re-run tpshard convert");
    file_bytes_ = static_cast<uint64_t>(st.st_size);
    const std::string& P = path_;
    if (file_bytes_ < kHeaderBytes)
      throw Error(P + ": file is " + std::to_string(file_bytes_) + " bytes, smaller than the 80-byte header", kCorruptHint);
    uint8_t h[kHeaderBytes];
    pread_all(fd_, h, kHeaderBytes, 0, P, "the header");
    if (std::memcmp(h, kMagic, 8) != 0) throw Error(P + ": not a tpshard shard file (bad magic)", "pass a *.tps file written by tpshard convert");
    header_.version = get_le<uint32_t>(h + kOffVersion);
    if (header_.version != kVersion) {
      // a plausible later version: written by a newer tpshard; anything else: the header is damaged
      if (header_.version == 0 || header_.version > 255)
        throw Error(P + ": the header's format version field holds " + std::to_string(header_.version) +
                        ", not a format version (this build reads version 1): the file is corrupt",
                    kCorruptHint);
      throw Error(P + ": shard format version " + std::to_string(header_.version) +
                      " is not supported (this build reads version 1): written by a newer tpshard",
                  "re-run tpshard convert with this version of tpshard, or run the tprun of the tpshard that wrote it");
    }
    header_.tp_rank = get_le<uint32_t>(h + kOffTpRank);
    header_.tp_size = get_le<uint32_t>(h + kOffTpSize);
    const uint32_t count = get_le<uint32_t>(h + kOffCount);
    const uint64_t table_offset = get_le<uint64_t>(h + kOffTableOffset);
    const uint64_t table_bytes = get_le<uint64_t>(h + kOffTableBytes);
    header_.data_offset = get_le<uint64_t>(h + kOffDataOffset);
    header_.data_bytes = get_le<uint64_t>(h + kOffDataBytes);
    header_.arena_bytes = get_le<uint64_t>(h + kOffArenaBytes);
    const uint64_t table_hash = get_le<uint64_t>(h + kOffTableXxh3);
    header_.table_xxh3 = table_hash;
    if (get_le<uint64_t>(h + kOffReserved) != 0) throw Error(P + ": reserved header field is not zero", kCorruptHint);
    if (header_.tp_size == 0 || header_.tp_rank >= header_.tp_size)
      throw Error(P + ": tp_rank " + std::to_string(header_.tp_rank) + " is not below tp_size " + std::to_string(header_.tp_size), kCorruptHint);
    if (table_offset != kHeaderBytes) throw Error(P + ": table offset " + std::to_string(table_offset) + " is not 80", kCorruptHint);
    uint64_t table_end = 0, data_end = 0;
    if (!add_ok(table_offset, table_bytes, &table_end) || table_end > file_bytes_)
      throw Error(P + ": tensor table (" + std::to_string(table_bytes) + " bytes) extends beyond the file (" +
                      std::to_string(file_bytes_) + " bytes)", kCorruptHint);
    if (header_.data_offset % kDataAlignment != 0 || header_.data_offset < table_end)
      throw Error(P + ": data offset " + std::to_string(header_.data_offset) + " is not 4096-aligned after the table", kCorruptHint);
    if (!add_ok(header_.data_offset, header_.data_bytes, &data_end) || data_end != file_bytes_)
      throw Error(P + ": file is " + std::to_string(file_bytes_) + " bytes but the header says " +
                      std::to_string(header_.data_offset) + " + " + std::to_string(header_.data_bytes), kCorruptHint);
    if (header_.data_bytes % kDataAlignment != 0 || header_.arena_bytes % kDataAlignment != 0)
      throw Error(P + ": data or arena size is not a multiple of 4096", kCorruptHint);
    if (count > table_bytes / kMinRecordBytes)
      throw Error(P + ": tensor count " + std::to_string(count) + " cannot fit in a " + std::to_string(table_bytes) + "-byte table", kCorruptHint);

    std::string table(static_cast<size_t>(table_bytes), '\0');
    pread_all(fd_, table.data(), table_bytes, table_offset, P, "the tensor table");
    if (xxh3_64(table.data(), table.size()) != table_hash) throw Error(P + ": tensor table checksum mismatch", kCorruptHint);

    TableCursor cur{reinterpret_cast<const uint8_t*>(table.data()), table_bytes, 0, P};
    std::unordered_set<std::string> seen;
    tensors_.reserve(count);
    bool any_compressed = false;
    uint64_t arena_end = 0, file_end = 0;
    for (uint32_t i = 0; i < count; ++i) {
      TensorRecord t;
      const uint16_t name_len = cur.get<uint16_t>();
      if (name_len == 0 || name_len > kMaxNameBytes) throw Error(P + ": tensor " + std::to_string(i) + " has a bad name length", kCorruptHint);
      const uint8_t* name = cur.take(name_len);
      t.name.assign(reinterpret_cast<const char*>(name), name_len);
      const std::string W = P + ": tensor " + t.name;
      if (!seen.insert(t.name).second) throw Error(W + " appears twice in the table", kCorruptHint);
      const uint8_t dtype = cur.get<uint8_t>(), split = cur.get<uint8_t>(), codec = cur.get<uint8_t>(), ndim = cur.get<uint8_t>();
      if (dtype > static_cast<uint8_t>(DType::BF16)) throw Error(W + ": unknown dtype code " + std::to_string(dtype), kCorruptHint);
      if (split > static_cast<uint8_t>(SplitKind::Vocab)) throw Error(W + ": unknown split kind " + std::to_string(split), kCorruptHint);
      if (codec > static_cast<uint8_t>(Codec::ZstdBytePlanes)) throw Error(W + ": unknown codec " + std::to_string(codec), kCorruptHint);
      if (ndim == 0 || ndim > kMaxDims) throw Error(W + ": bad rank " + std::to_string(ndim), kCorruptHint);
      t.dtype = static_cast<DType>(dtype);
      t.split = static_cast<SplitKind>(split);
      t.codec = static_cast<Codec>(codec);
      t.split_axis = cur.get<int32_t>();
      for (int d = 0; d < ndim; ++d) t.global_shape.push_back(cur.get<int64_t>());
      for (int d = 0; d < ndim; ++d) t.local_shape.push_back(cur.get<int64_t>());
      t.file_offset = cur.get<uint64_t>();
      t.stored_bytes = cur.get<uint64_t>();
      t.arena_offset = cur.get<uint64_t>();
      t.raw_bytes = cur.get<uint64_t>();
      t.xxh3 = cur.get<uint64_t>();

      // Shapes: local == global except along split_axis, where 0 < local <= global (global is the sum
      // over the tp ranks; the exact extents are checked against the parallel layout, model/rank_shard.h).
      if (t.split == SplitKind::Replicated ? t.split_axis != -1 : (t.split_axis < 0 || t.split_axis >= ndim))
        throw Error(W + ": split axis " + std::to_string(t.split_axis) + " does not fit split kind " + split_kind_name(t.split), kCorruptHint);
      uint64_t numel = 1;
      for (int d = 0; d < ndim; ++d) {
        const int64_t g = t.global_shape[d], l = t.local_shape[d];
        if (g < 0 || l < 0) throw Error(W + ": negative dimension", kCorruptHint);
        const bool ok = d == t.split_axis ? (l > 0 && l <= g && (header_.tp_size > 1 || l == g)) : g == l;
        if (!ok) throw Error(W + ": global and local shapes disagree on axis " + std::to_string(d), kCorruptHint);
        if (!mul_ok(numel, static_cast<uint64_t>(l), &numel)) throw Error(W + ": element count overflows", kCorruptHint);
      }
      uint64_t raw = 0;
      if (!mul_ok(numel, dtype_size(t.dtype), &raw) || raw != t.raw_bytes)
        throw Error(W + ": raw_bytes " + std::to_string(t.raw_bytes) + " != elements * dtype size", kCorruptHint);
      if (t.codec == Codec::None && t.stored_bytes != t.raw_bytes) throw Error(W + ": stored_bytes != raw_bytes for an uncompressed tensor", kCorruptHint);
      // A zstd frame is never empty: a compressed tensor with no stored bytes would be left unwritten.
      if (t.codec != Codec::None && t.raw_bytes > 0 && t.stored_bytes == 0) throw Error(W + ": a compressed tensor with no stored bytes", kCorruptHint);
      if (t.codec == Codec::ZstdBytePlanes && dtype_size(t.dtype) != 2) throw Error(W + ": byte-plane codec on a 4-byte dtype", kCorruptHint);
      if (t.codec != Codec::None) any_compressed = true;
      // Placement: 4096-aligned, ascending, non-overlapping, inside the data section and the arena.
      uint64_t fend = 0, aend = 0;
      if (t.file_offset % kDataAlignment || t.arena_offset % kDataAlignment) throw Error(W + ": offset is not 4096-aligned", kCorruptHint);
      if (!add_ok(t.file_offset, t.stored_bytes, &fend) || fend > header_.data_bytes)
        throw Error(W + ": data range [" + std::to_string(t.file_offset) + ", +" + std::to_string(t.stored_bytes) + ") is outside the data section", kCorruptHint);
      if (!add_ok(t.arena_offset, t.raw_bytes, &aend) || aend > header_.arena_bytes)
        throw Error(W + ": arena range is outside arena_bytes " + std::to_string(header_.arena_bytes), kCorruptHint);
      if (t.file_offset < file_end || t.arena_offset < arena_end)
        throw Error(W + ": data overlaps the previous tensor or is out of order", kCorruptHint);
      file_end = fend;
      arena_end = aend;
      tensors_.push_back(std::move(t));
    }
    if (cur.pos != table_bytes) throw Error(P + ": " + std::to_string(table_bytes - cur.pos) + " unused bytes after the tensor table", kCorruptHint);
    if (!any_compressed) {
      for (const auto& t : tensors_)
        if (t.file_offset != t.arena_offset) throw Error(P + ": tensor " + t.name + ": uncompressed file but file offset != arena offset", kCorruptHint);
    }
  } catch (...) {
    ::close(fd_);
    fd_ = -1;
    throw;
  }
}

ShardReader::~ShardReader() {
  if (fd_ >= 0) ::close(fd_);
}

const TensorRecord* ShardReader::find(const std::string& name) const {
  for (const auto& t : tensors_)
    if (t.name == name) return &t;
  return nullptr;
}

const TensorRecord& ShardReader::at(const std::string& name) const {
  const TensorRecord* t = find(name);
  if (!t) throw Error(path_ + ": tensor " + name + " is missing", "the shard was written for another model or a different tpshard version; re-run tpshard convert");
  return *t;
}

uint64_t ShardReader::hash_stored(const TensorRecord& t) const {
  return xxh3_fd_range(fd_, header_.data_offset + t.file_offset, t.stored_bytes, path_, false);
}

void ShardReader::read_tensor(const TensorRecord& t, void* dst, bool verify) const {
  const std::string W = path_ + ": tensor " + t.name;
  const uint64_t at = header_.data_offset + t.file_offset;
  if (t.codec == Codec::None) {
    pread_all(fd_, dst, t.raw_bytes, at, path_, "tensor " + t.name);
    if (verify && xxh3_64(dst, t.raw_bytes) != t.xxh3)
      throw Error(W + ": checksum mismatch (the stored bytes are corrupt)", "run `tpshard verify` and re-run tpshard convert");
    return;
  }
  std::vector<uint8_t> stored(t.stored_bytes);
  pread_all(fd_, stored.data(), t.stored_bytes, at, path_, "tensor " + t.name);
  if (verify && xxh3_64(stored.data(), stored.size()) != t.xxh3)
    throw Error(W + ": checksum mismatch (the stored bytes are corrupt)", "run `tpshard verify` and re-run tpshard convert");
  std::vector<uint8_t> planes;
  void* out = dst;
  if (t.codec == Codec::ZstdBytePlanes) {
    planes.resize(t.raw_bytes);
    out = planes.data();
  }
  const size_t got = ZSTD_decompress(out, t.raw_bytes, stored.data(), stored.size());
  if (ZSTD_isError(got)) throw Error(W + ": zstd decompression failed: " + ZSTD_getErrorName(got), kCorruptHint);
  if (got != t.raw_bytes) throw Error(W + ": zstd frame holds " + std::to_string(got) + " bytes, expected " + std::to_string(t.raw_bytes), kCorruptHint);
  if (t.codec == Codec::ZstdBytePlanes) {
    const size_t n = t.raw_bytes / 2;
    auto* d = static_cast<uint8_t*>(dst);
    for (size_t i = 0; i < n; ++i) {
      d[2 * i] = planes[i];
      d[2 * i + 1] = planes[n + i];
    }
  }
}

std::vector<float> ShardReader::read_tensor_f32(const std::string& name, bool verify) const {
  const TensorRecord& t = at(name);
  std::vector<uint8_t> raw(t.raw_bytes);
  read_tensor(t, raw.data(), verify);
  const size_t n = t.raw_bytes / dtype_size(t.dtype);
  std::vector<float> out(n);
  convert_elements(raw.data(), t.dtype, out.data(), DType::F32, n, path_ + ": " + name);
  return out;
}

}  // namespace tpshard
