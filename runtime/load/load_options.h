// load_options.h: how one rank's shard is streamed into its weight memory (stream_shard, shard_stream.h),
// and what the load measured. Shared by the CUDA weight arena and the host target.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace tpshard::load {

/// How the shard file's bytes are read. auto: io_uring for O_DIRECT reads when the kernel allows it
/// (a deep queue for a cold cache), pread otherwise (page-cache reads: io_uring adds nothing there).
enum class IoEngine { Auto, Pread, Uring };

/// Parses "auto" / "pread" / "uring"; throws Error naming `what` otherwise.
IoEngine parse_io_engine(const std::string& name, const std::string& what);

/// How a device target pins its staging ring. RegisterLazy: 2 MiB-aligned memory advised for transparent
/// huge pages, each buffer cudaHostRegister'ed by the reader thread that first copies from it (pinning
/// overlaps the other threads' reads); RegisterUpfront: the whole ring registered before any read;
/// HostAlloc: cudaHostAlloc.
enum class RingPinning { RegisterLazy, RegisterUpfront, HostAlloc };

/// Parses "register" / "register-upfront" / "alloc"; throws Error naming `what` otherwise.
RingPinning parse_ring_pinning(const std::string& name, const std::string& what);
/// The name parse_ring_pinning takes for p.
const char* ring_pinning_name(RingPinning p);

struct LoadOptions {
  size_t ring_buffers = 0;              ///< staging buffers; 0: (queue_depth + 1) per reader thread
  size_t ring_buffer_bytes = 4u << 20;  ///< bytes each (a read of an uncompressed tensor is this minus 8 KiB)
  int reader_threads = 0;               ///< 0: default_reader_threads(1); a worker passes its local ranks
  bool verify_hashes = true;            ///< XXH3 of every tensor while streaming
  bool direct_io = false;               ///< O_DIRECT reads (cold cache: bypasses the page cache)
  IoEngine io = IoEngine::Auto;         ///< see IoEngine
  int queue_depth = 0;  ///< reads in flight per reader thread with io_uring; 0: 4. pread: always 1
  /// Device targets: how the staging ring is pinned (docs/LOADER.md, measured in docs/BENCHMARKS.md).
  RingPinning pinning = RingPinning::RegisterLazy;
};

struct LoadReport {
  double seconds = 0;
  uint64_t file_bytes = 0;   ///< data-section bytes read
  uint64_t arena_bytes = 0;  ///< bytes of weights in the target
  size_t pinned_bytes = 0;   ///< staging ring actually allocated (smaller than the options for small shards)
  // Where the time went, summed over reader threads (seconds).
  double read_seconds = 0;        ///< reads (pread) or waits for them (io_uring)
  double hash_seconds = 0;        ///< XXH3 of the stored bytes
  double decompress_seconds = 0;  ///< zstd
  double setup_seconds = 0;       ///< target allocation, staging ring
  int reader_threads = 0;         ///< threads actually used
  int queue_depth = 1;            ///< reads in flight per reader thread
  std::string io;                 ///< the read path used: "pread", "pread O_DIRECT", "io_uring O_DIRECT", ...
};

/// Reader threads for one of `local_ranks` ranks loading at once on this host: the usable CPUs
/// (affinity mask and cgroup quota, runtime/cpu_budget.h) shared out, at least 2, at most 32.
int default_reader_threads(int local_ranks);

}  // namespace tpshard::load
