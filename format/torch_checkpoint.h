// torch_checkpoint.h: memory-mapped, validating reader of one PyTorch checkpoint file in torch.save's
// zip format (PyTorch >= 1.6; pytorch_model.bin, or one shard that pytorch_model.bin.index.json lists)
// holding a state dict of tensors. The archive holds <top>/data.pkl (the pickled dict, read by the
// restricted unpickler of torch_pickle.h) and <top>/data/<key>, one stored entry per storage; each
// tensor becomes an StTensor pointing into the mapping, like a safetensors tensor.
// Input is untrusted: the zip directory, the pickle and every tensor's extent are checked.
// Does not own: the zip directory (zip_archive.h), the pickle (torch_pickle.h), choosing files (checkpoint.h).
#pragma once
#include <cstdint>
#include <map>
#include <string>

#include "format/checkpoint_file.h"
#include "format/mapped_file.h"

namespace tpshard {

/// The largest data.pkl read (a state dict needs about 200 bytes of pickle per tensor).
constexpr uint64_t kMaxTorchPickleBytes = 256ull << 20;

/// One mmapped torch.save archive.
class TorchCheckpointFile : public CheckpointFile {
 public:
  /// Maps and validates the file. Throws Error naming the file (and the tensor or entry) for: PyTorch's
  /// legacy pre-1.6 format or any other non-zip file (the hint says how to re-save it), a bad zip directory
  /// (zip_archive.h), no or several <top>/data.pkl, a big-endian archive (<top>/byteorder), a compressed
  /// or encrypted data.pkl or storage entry, a data.pkl over kMaxTorchPickleBytes, everything
  /// read_torch_state_dict refuses, a storage key without its <top>/data/<key> entry, an entry whose size
  /// is not numel x element size of its storage, a tensor whose strides are not contiguous row-major, and
  /// a tensor whose storage_offset + numel exceeds its storage.
  explicit TorchCheckpointFile(const std::string& path);

  const std::string& path() const override { return map_.path(); }
  uint64_t size() const override { return map_.size(); }
  const std::map<std::string, StTensor>& tensors() const override { return tensors_; }
  /// Tied tensors share bytes: dropping one's pages makes the other's next read come from disk again.
  void drop_pages(const StTensor& t) const override { map_.drop_pages(t.file_offset, t.bytes); }
  void release(const StTensor& t, uint64_t offset, uint64_t n) const override { map_.release(t.file_offset + offset, n); }

 private:
  MappedFile map_;
  std::map<std::string, StTensor> tensors_;
};

}  // namespace tpshard
