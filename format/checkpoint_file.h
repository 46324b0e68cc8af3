// checkpoint_file.h: what the converter reads from one source file of a checkpoint, whatever its format
// (safetensors.h, torch_checkpoint.h): the tensors, each pointing into the file's read-only mapping, and
// the page releases that keep resident memory flat while they are streamed.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "format/dtype.h"

namespace tpshard {

/// One tensor of a checkpoint file. `data` points into the read-only mapping of `file` and holds `bytes`
/// bytes: the elements in row-major order, little-endian.
struct StTensor {
  std::string name;
  std::string dtype_str;        ///< safetensors' spelling, e.g. "BF16", "F32", "I64", "BOOL" (also for .bin files)
  bool dtype_supported = false; ///< F32 / F16 / BF16
  DType dtype = DType::F32;     ///< valid when dtype_supported
  std::vector<int64_t> shape;   ///< [] for a 0-dim (scalar) tensor
  const uint8_t* data = nullptr;
  uint64_t bytes = 0;
  uint64_t file_offset = 0;     ///< absolute offset in the file
  std::string file;             ///< path of the file holding it
};

/// One mapped source file of a checkpoint (a .safetensors file or a PyTorch .bin archive).
class CheckpointFile {
 public:
  virtual ~CheckpointFile() = default;
  virtual const std::string& path() const = 0;
  /// File size in bytes.
  virtual uint64_t size() const = 0;
  /// Every tensor of the file by name (also those of dtypes the converter does not read).
  virtual const std::map<std::string, StTensor>& tensors() const = 0;
  /// Release the pages of [data, data + bytes) from this process (madvise DONTNEED) and from the
  /// page cache (posix_fadvise DONTNEED), so resident memory does not grow with model size.
  virtual void drop_pages(const StTensor& t) const = 0;
  /// Unmap [offset, offset + n) of t (relative to t.data) from this process only (madvise DONTNEED);
  /// the page cache keeps the bytes, so a later read is served from memory.
  virtual void release(const StTensor& t, uint64_t offset, uint64_t n) const = 0;
};

}  // namespace tpshard
