// weight_arena.h: one rank's weights in one device allocation, loaded by streaming its shard file
// through a ring of pinned host buffers (issue: GPU runtime part 1). Tensor views are offsets into
// the arena; nothing is rearranged at load time.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>

#include "format/shard_file.h"

namespace tpshard::cuda {

/// Reader threads for one of `local_ranks` ranks loading at once on this host: the hardware threads
/// shared out (usable_cpus() / local_ranks, runtime/cpu_budget.h), at least 2, at most 32.
int default_reader_threads(int local_ranks);

struct LoadOptions {
  size_t ring_buffers = 0;              ///< pinned host buffers; 0: 2 per reader thread
  size_t ring_buffer_bytes = 2u << 20;  ///< bytes each (a read of an uncompressed tensor is this minus 8 KiB)
  int reader_threads = 0;               ///< 0: default_reader_threads(1); the worker passes its local ranks
  bool verify_hashes = true;             ///< XXH3 of every tensor while streaming
  bool direct_io = false;                ///< O_DIRECT reads (cold cache)
  /// Ring pinned by cudaHostRegister of aligned_alloc memory (measured faster on an H200 host: 45.5 vs
  /// 42.4 GB/s, docs/BENCHMARKS.md), or false: cudaHostAlloc.
  bool register_ring = true;
};

struct LoadReport {
  double seconds = 0;
  uint64_t file_bytes = 0;     ///< data-section bytes read
  uint64_t arena_bytes = 0;    ///< device bytes of weights
  size_t pinned_bytes = 0;     ///< host ring size actually allocated (smaller than the options for small shards)
  // Added by the loader (additive): where the time went, summed over reader threads (seconds).
  double read_seconds = 0;        ///< pread / O_DIRECT reads
  double hash_seconds = 0;        ///< XXH3 of the stored bytes
  double decompress_seconds = 0;  ///< zstd
  double setup_seconds = 0;       ///< arena cudaMalloc + memset, pinned ring allocation
  int reader_threads = 0;         ///< threads actually used
};

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
