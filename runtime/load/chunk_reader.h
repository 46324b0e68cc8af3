// chunk_reader.h: how one loader thread reads byte ranges of a shard file into its staging buffers:
// pread (page cache, or O_DIRECT one request at a time) or io_uring (O_DIRECT with several requests in
// flight per thread, so a cold load keeps the disk's queue full while earlier chunks are hashed and copied).
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "format/hash.h"
#include "runtime/load/load_options.h"

namespace tpshard::load {

constexpr uint64_t kPage = 4096;  ///< O_DIRECT alignment of offsets, lengths and buffers

/// Time spent, summed over threads (nanoseconds).
struct LoadTimers {
  std::atomic<int64_t> read_ns{0}, hash_ns{0}, zstd_ns{0};
};

/// One byte range to read into a staging buffer. With O_DIRECT the read is widened to page boundaries,
/// so `capacity` must hold length + 2 pages.
struct ReadRequest {
  uint64_t offset = 0;
  size_t length = 0;
  uint8_t* buffer = nullptr;
  size_t capacity = 0;
};

class ChunkReader {
 public:
  virtual ~ChunkReader() = default;
  /// Requests this reader keeps in flight at once (1: each submit is completed before the next).
  virtual int depth() const = 0;
  /// Starts the read of `req` under `slot` (a staging buffer index, unique while in flight).
  virtual void submit(size_t slot, const ReadRequest& req) = 0;
  /// Waits for the request of `slot`; returns the pointer to its first requested byte inside the buffer.
  /// Feeds the bytes to `hash` in order when non-null (the buffered pread path reads and hashes in pieces
  /// that stay in the core's cache). Throws Error naming the file on a read error or a truncated file.
  virtual const uint8_t* complete(size_t slot, Xxh3Stream* hash, LoadTimers& timers) = 0;
};

/// A reader for one thread. fd must be opened with O_DIRECT when direct. engine Auto picks io_uring for
/// O_DIRECT reads when the kernel allows it (containers may forbid io_uring_setup), pread otherwise;
/// Uring falls back to pread the same way. `used` gets the path's name ("pread", "pread O_DIRECT",
/// "io_uring O_DIRECT", "io_uring"); depth is io_uring's queue depth (1..64).
std::unique_ptr<ChunkReader> make_chunk_reader(int fd, bool direct, IoEngine engine, int depth,
                                               const std::string& path, std::string* used);

/// Synchronous read of [offset, offset + length) into buf (capacity cap), widened to pages when direct;
/// returns the first requested byte. Throws Error naming path on a read error or a truncated file.
const uint8_t* read_range(int fd, bool direct, uint64_t offset, size_t length, uint8_t* buf, size_t cap,
                          const std::string& path);

}  // namespace tpshard::load
