// weight_arena.h: one rank's weights in one device allocation, loaded by streaming its shard file
// through a ring of pinned host buffers (runtime/load/shard_stream.h with a device target). Tensor views
// are offsets into the arena; nothing is rearranged at load time.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>

#include "format/shard_file.h"
#include "runtime/load/load_options.h"

namespace tpshard::cuda {

// The loader's options and report (runtime/load/load_options.h), under the names this backend used.
using load::default_reader_threads;
using load::LoadOptions;
using load::LoadReport;

/// Device-resident weights of one rank. Owns the allocation (cudaFree in the destructor).
class WeightArena {
 public:
  /// Allocate arena_bytes on the current device and stream the shard's data section into it.
  /// Throws Error naming the file on hash mismatch, short read, or when the allocation does not fit
  /// (message gives needed and free bytes).
  WeightArena(const ShardReader& shard, const LoadOptions& opts, LoadReport* report = nullptr);
  ~WeightArena();
  WeightArena(const WeightArena&) = delete;
  WeightArena& operator=(const WeightArena&) = delete;

  void* base() const { return base_; }
  size_t bytes() const { return bytes_; }
  /// Device pointer of a tensor, nullptr when absent.
  const void* find(const std::string& name) const;
  /// Device pointer of a tensor, or Error naming it and the shard file.
  const void* at(const std::string& name) const;
  const TensorRecord& record(const std::string& name) const;

 private:
  void* base_ = nullptr;
  size_t bytes_ = 0;
  std::string path_;
  std::unordered_map<std::string, TensorRecord> records_;
};

}  // namespace tpshard::cuda
