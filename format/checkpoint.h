// checkpoint.h: a whole Hugging Face checkpoint, whichever of its published forms HF_DIR holds, tried in
// this order: model.safetensors.index.json + its shards, model.safetensors, pytorch_model.bin.index.json +
// its shards, pytorch_model.bin (torch.save's zip format). Every file is mapped; tensors are looked up by
// name across the files. Does not own: reading one file (safetensors.h, torch_checkpoint.h).
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "format/checkpoint_file.h"

namespace tpshard {

/// A whole checkpoint: the files of HF_DIR's first form above.
class Checkpoint {
 public:
  /// Throws Error when HF_DIR holds none of the four forms, when an index is not valid JSON, has no
  /// "weight_map" object, names a file with '/' or a file missing from HF_DIR, or names a tensor its file
  /// lacks, when a tensor appears in two files, and for everything a file's reader refuses.
  explicit Checkpoint(const std::string& hf_dir);
  /// nullptr when absent.
  const StTensor* find(const std::string& name) const;
  std::vector<std::string> names() const;
  const std::vector<std::unique_ptr<CheckpointFile>>& files() const { return files_; }
  void drop_pages(const StTensor& t) const;
  void release(const StTensor& t, uint64_t offset, uint64_t n) const;

 private:
  std::vector<std::unique_ptr<CheckpointFile>> files_;
  std::map<std::string, std::pair<size_t, const StTensor*>> index_;
};

}  // namespace tpshard
