// mapped_file.h: a whole file mapped read-only (the checkpoint readers' view of a source file), and the
// page releases that keep the converter's resident memory flat.
// Owns: open + fstat + mmap + munmap. Does not own: what the bytes mean (safetensors.h, torch_checkpoint.h).
#pragma once
#include <cstdint>
#include <string>

namespace tpshard {

/// A file mapped read-only (MAP_SHARED) for the object's lifetime. Throws Error naming the path when it
/// cannot be opened, stat'ed or mapped. An empty file is valid (data() is nullptr, size() 0).
class MappedFile {
 public:
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::string& path() const { return path_; }
  const uint8_t* data() const { return map_; }
  /// File size in bytes.
  uint64_t size() const { return size_; }
  /// Release the pages of [offset, offset + n) from this process (madvise DONTNEED) and from the page
  /// cache (posix_fadvise DONTNEED). The range must lie inside the file.
  void drop_pages(uint64_t offset, uint64_t n) const;
  /// Unmap [offset, offset + n) from this process only (madvise DONTNEED); the page cache keeps the
  /// bytes, so a later read is served from memory. The range must lie inside the file.
  void release(uint64_t offset, uint64_t n) const;
  /// Hint sequential access for the whole mapping (madvise SEQUENTIAL).
  void advise_sequential() const;

 private:
  std::string path_;
  int fd_ = -1;
  uint8_t* map_ = nullptr;
  uint64_t size_ = 0;
};

}  // namespace tpshard
