// safetensors.h: memory-mapped, validating reader of Hugging Face safetensors checkpoints (a single
// model.safetensors, or shards listed by model.safetensors.index.json). Input is untrusted: header
// length, JSON, dtypes, shapes and data offsets are all checked against the file.
// Does not own: name mapping or slicing (format/convert/).
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "format/dtype.h"

namespace tpshard {

/// One tensor of a safetensors file. `data` points into the read-only mapping.
struct StTensor {
  std::string name;
  std::string dtype_str;        ///< as written, e.g. "BF16", "F32", "I64"
  bool dtype_supported = false; ///< F32 / F16 / BF16
  DType dtype = DType::F32;     ///< valid when dtype_supported
  std::vector<int64_t> shape;   ///< [] for a 0-dim (scalar) tensor
  const uint8_t* data = nullptr;
  uint64_t bytes = 0;
  uint64_t file_offset = 0;     ///< absolute offset in the file
  std::string file;             ///< path of the file holding it
};

/// One mmapped safetensors file.
class SafetensorsFile {
 public:
  /// Maps and validates the file. Throws Error naming the file for: a file shorter than 8 bytes,
  /// a header length beyond the file, invalid JSON, unknown dtypes, negative or overflowing shapes,
  /// byte length != elements * dtype size, offsets outside the data area, overlapping tensors.
  explicit SafetensorsFile(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  uint64_t size() const { return size_; }
  const std::map<std::string, StTensor>& tensors() const { return tensors_; }
  /// Release the pages of [data, data + bytes) from this process (madvise DONTNEED) and from the
  /// page cache (posix_fadvise DONTNEED), so resident memory does not grow with model size.
  void drop_pages(const StTensor& t) const;
  /// Unmap [offset, offset + n) of t (relative to t.data) from this process only (madvise DONTNEED);
  /// the page cache keeps the bytes, so a later read is served from memory.
  void release(const StTensor& t, uint64_t offset, uint64_t n) const;

 private:
  std::string path_;
  int fd_ = -1;
  uint8_t* map_ = nullptr;
  uint64_t size_ = 0;
  std::map<std::string, StTensor> tensors_;
};

/// A whole checkpoint: HF_DIR/model.safetensors or HF_DIR/model.safetensors.index.json + its shards.
class Checkpoint {
 public:
  /// Throws Error when neither exists (mentions pytorch_model.bin when only that exists), when the
  /// index names a missing file, names a tensor its file lacks, or a tensor appears in two files.
  explicit Checkpoint(const std::string& hf_dir);
  /// nullptr when absent.
  const StTensor* find(const std::string& name) const;
  std::vector<std::string> names() const;
  const std::vector<std::unique_ptr<SafetensorsFile>>& files() const { return files_; }
  void drop_pages(const StTensor& t) const;
  void release(const StTensor& t, uint64_t offset, uint64_t n) const;

 private:
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, std::pair<size_t, const StTensor*>> index_;
};

}  // namespace tpshard
