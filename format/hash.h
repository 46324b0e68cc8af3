// hash.h: XXH3-64 (seed 0) helpers used for tensor, shard-file and source-file fingerprints.
// Owns: hashing of buffers and files, and the hex spelling of hashes in manifest.json.
// Hash values are stored in shard files as little-endian u64 and in JSON as 16 lowercase hex digits
// of the numeric value (identical to xxHash's canonical big-endian representation).
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace tpshard {

/// XXH3-64 with seed 0 of n bytes.
uint64_t xxh3_64(const void* data, size_t n);

/// The XXH3 code in use: "avx512" or "avx2" (built from xxHash's header for that vector unit, chosen by
/// CPUID at start-up), else "sse2" (libxxhash). All give the same hash values; wider is faster (one core
/// of the build machine: 4.8 / 12.6 / 25.1 GB/s in cache).
const char* xxh3_implementation();
/// Select one by name ("auto", "sse2", "avx2", "avx512") for later hashes (A/B measurements); a stream
/// keeps the one it was created with. Throws Error when this CPU or build lacks it.
void set_xxh3_implementation(const std::string& name);

/// Streaming XXH3-64 (seed 0); feed bytes in order, then digest().
class Xxh3Stream {
 public:
  Xxh3Stream();
  ~Xxh3Stream();
  Xxh3Stream(Xxh3Stream&&) noexcept;
  Xxh3Stream& operator=(Xxh3Stream&&) noexcept;
  void reset();  ///< start a new hash (as if newly constructed)
  void update(const void* data, size_t n);
  uint64_t digest() const;

 private:
  struct State;
  std::unique_ptr<State> s_;
};

/// XXH3-64 of bytes [offset, offset+length) of an open file descriptor, read with pread in 8 MiB
/// chunks. Drops the read pages from the page cache afterwards (posix_fadvise DONTNEED) when drop_cache.
/// `bytes_done` (optional) is increased as bytes are hashed (progress reporting). `after_chunk`
/// (optional) is called after each chunk; it may throw to stop the hashing (e.g. on Ctrl-C), and the
/// exception passes through (the file of xxh3_file is closed).
/// Throws Error naming `path` on a read error or short file.
uint64_t xxh3_fd_range(int fd, uint64_t offset, uint64_t length, const std::string& path, bool drop_cache = true,
                       uint64_t* bytes_done = nullptr, const std::function<void()>& after_chunk = {});
/// XXH3-64 of a whole file.
uint64_t xxh3_file(const std::string& path, uint64_t* bytes_done = nullptr,
                   const std::function<void()>& after_chunk = {});

/// "0123456789abcdef" spelling (16 lowercase hex digits).
std::string hash_to_hex(uint64_t h);
/// Inverse of hash_to_hex. Throws Error naming `what` when s is not 16 hex digits.
uint64_t hash_from_hex(const std::string& s, const std::string& what);

}  // namespace tpshard
