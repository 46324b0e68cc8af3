// shard_file.h: one tp_rank's shard file (*.tps): header, tensor table, 4096-aligned data section.
// The byte layout is specified in docs/FORMAT.md; this header is the C++ view of it.
// Owns: reading (untrusted input, every field checked) and writing shard files. Does not own: the
// manifest (manifest.h), tensor naming (tensor_names.h), device placement (runtime/).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "format/dtype.h"

namespace tpshard {

/// How a tensor is partitioned across tp ranks (Megatron-LM terms). Values are part of the format.
enum class SplitKind : uint8_t {
  Replicated = 0,  ///< every rank holds the whole tensor (norms, row-parallel biases)
  Column = 1,      ///< output features split (QKV, MLP up/gate): split_axis 0 of [out, in]
  Row = 2,         ///< input features split (attention output, MLP down): split_axis 1 of [out, in]
  Vocab = 3,       ///< vocabulary rows split (token_embd, output), vocab padded to a multiple of tp_size
};
const char* split_kind_name(SplitKind k);  ///< "replicated", "column", "row", "vocab"

/// How a tensor's bytes are stored. Values are part of the format.
enum class Codec : uint8_t {
  None = 0,            ///< raw little-endian elements
  Zstd = 1,            ///< zstd frame of the raw bytes
  ZstdBytePlanes = 2,  ///< 2-byte dtypes: all low bytes then all high bytes, then one zstd frame
};

constexpr uint64_t kDataAlignment = 4096;  ///< data section offset and every tensor's arena offset

/// One entry of the tensor table.
struct TensorRecord {
  std::string name;                   ///< tensor_names.h, e.g. "blk.3.attn_qkv.weight"
  DType dtype = DType::F32;
  std::vector<int64_t> global_shape;  ///< shape of the whole (unsplit, layout-transformed) tensor
  std::vector<int64_t> local_shape;   ///< shape held by this rank
  SplitKind split = SplitKind::Replicated;
  int32_t split_axis = -1;            ///< axis of global_shape that is split; -1 when replicated
  uint64_t file_offset = 0;   ///< offset of the stored bytes, relative to the data section start
  uint64_t stored_bytes = 0;  ///< bytes in the file (== raw_bytes when codec is None)
  uint64_t arena_offset = 0;  ///< offset in the rank's one device allocation (== file_offset when no tensor is compressed)
  uint64_t raw_bytes = 0;     ///< product(local_shape) * dtype_size(dtype)
  Codec codec = Codec::None;
  uint64_t xxh3 = 0;          ///< XXH3-64 (seed 0) of the stored bytes
};

/// Fixed header facts of a shard file.
struct ShardHeader {
  uint32_t version = 1;
  uint32_t tp_rank = 0;
  uint32_t tp_size = 1;
  uint64_t data_offset = 0;   ///< absolute file offset of the data section (multiple of 4096)
  uint64_t data_bytes = 0;    ///< bytes of the data section as stored
  uint64_t arena_bytes = 0;   ///< bytes of the device arena (sum of aligned raw sizes)
  uint64_t table_xxh3 = 0;    ///< XXH3-64 of the tensor table bytes (checked on open); identifies the shard
};

/// Read-only view of a shard file. Construction reads and validates header and table (not the data):
/// magic, version, sizes/offsets against the file size with overflow checks, alignment, known dtype /
/// split / codec, duplicate names, raw_bytes == product(local_shape) * dtype_size, non-overlapping
/// ascending data ranges. Throws Error naming the file and the problem.
class ShardReader {
 public:
  explicit ShardReader(const std::string& path);
  ~ShardReader();
  ShardReader(const ShardReader&) = delete;
  ShardReader& operator=(const ShardReader&) = delete;

  const std::string& path() const { return path_; }
  const ShardHeader& header() const { return header_; }
  const std::vector<TensorRecord>& tensors() const { return tensors_; }
  /// nullptr when absent.
  const TensorRecord* find(const std::string& name) const;
  /// The record, or Error naming the tensor and the file.
  const TensorRecord& at(const std::string& name) const;

  /// Read and decode one tensor into dst (raw_bytes long). Checks the stored bytes' XXH3 when verify.
  /// Throws Error naming the tensor and the file on short read, hash mismatch or zstd failure.
  void read_tensor(const TensorRecord& t, void* dst, bool verify = true) const;
  /// Convenience: read_tensor, converted to f32 (product(local_shape) elements).
  std::vector<float> read_tensor_f32(const std::string& name, bool verify = true) const;
  /// XXH3-64 of t's stored bytes as they are in the file (streamed, no decoding): what `tpshard verify`
  /// compares against t.xxh3. Throws Error naming the file on a read error.
  uint64_t hash_stored(const TensorRecord& t) const;
  /// Size of the file in bytes (== header().data_offset + header().data_bytes).
  uint64_t file_bytes() const { return file_bytes_; }
  /// File descriptor, for loaders that stream the data section themselves (pread / O_DIRECT).
  int fd() const { return fd_; }

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t file_bytes_ = 0;
  ShardHeader header_;
  std::vector<TensorRecord> tensors_;
};

/// Writes one shard file. Tensors must be added in arena order; data goes to `path` (the caller
/// writes to a temporary directory and renames it when the whole conversion succeeded).
/// Usage: ShardWriter w(path, rank, size); w.add(rec, bytes)...; w.finish();
class ShardWriter {
 public:
  ShardWriter(const std::string& path, uint32_t tp_rank, uint32_t tp_size);
  ~ShardWriter();
  /// Declare all tensors first (fixes the table size): name, dtype, shapes, split, codec. Offsets are
  /// assigned here. Must be called once before write().
  void declare(std::vector<TensorRecord> records);
  /// Write the raw (uncompressed) bytes of declared tensor `index`; encodes with its codec and hashes.
  /// Uncompressed tensors may be written in any order and from several threads; compressed tensors
  /// of one file are written one after another in index order (their file offsets follow the data).
  void write(size_t index, const void* raw, size_t raw_bytes);

  /// Streaming form of write() for tensors too large to hold in memory:
  /// begin_tensor(i); for each pass p < passes(i): { append(i, ...) until all raw bytes were given;
  /// next_pass(i) }; end_tensor(i). passes() is 2 for Codec::ZstdBytePlanes (the raw bytes are given
  /// twice: pass 0 stores the low bytes, pass 1 the high bytes) and 1 otherwise. Different indices may
  /// stream concurrently from different threads (compressed ones: one at a time, in index order).
  void begin_tensor(size_t index);
  int passes(size_t index) const;
  void append(size_t index, const void* raw, size_t n);
  void next_pass(size_t index);
  void end_tensor(size_t index);
  /// Remove the partial file (called by the converter on failure; also done by the destructor when
  /// finish() was not reached).
  void abandon();
  /// zstd level for Codec::Zstd / ZstdBytePlanes tensors (default 3). Call before writing.
  void set_zstd_level(int level);
  /// Write header and table, fsync, close. Throws Error (e.g. disk full) naming the file.
  void finish();
  const std::vector<TensorRecord>& records() const { return records_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::vector<TensorRecord> records_;
};

}  // namespace tpshard
