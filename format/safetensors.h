// safetensors.h: memory-mapped, validating reader of one Hugging Face safetensors file (model.safetensors
// or one shard that model.safetensors.index.json lists). Input is untrusted: header
// length, JSON, dtypes, shapes and data offsets are all checked against the file.
// Does not own: choosing the checkpoint's files (checkpoint.h), name mapping or slicing (convert/).
#pragma once
#include <cstdint>
#include <map>
#include <string>

#include "format/checkpoint_file.h"
#include "format/mapped_file.h"

namespace tpshard {

/// One mmapped safetensors file.
class SafetensorsFile : public CheckpointFile {
 public:
  /// Maps and validates the file. Throws Error naming the file for: a file shorter than 8 bytes,
  /// a header length beyond the file, invalid JSON, unknown dtypes, negative or overflowing shapes,
  /// byte length != elements * dtype size, offsets outside the data area, overlapping tensors.
  explicit SafetensorsFile(const std::string& path);

  const std::string& path() const override { return map_.path(); }
  uint64_t size() const override { return map_.size(); }
  const std::map<std::string, StTensor>& tensors() const override { return tensors_; }
  void drop_pages(const StTensor& t) const override { map_.drop_pages(t.file_offset, t.bytes); }
  void release(const StTensor& t, uint64_t offset, uint64_t n) const override { map_.release(t.file_offset + offset, n); }

 private:
  MappedFile map_;
  std::map<std::string, StTensor> tensors_;
};

}  // namespace tpshard
