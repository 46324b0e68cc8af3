// zip_archive.h: the directory of a zip archive held in memory (PKWARE APPNOTE 6.3: end of central
// directory, zip64 end of central directory record and locator, central directory, local headers), as
// PyTorch's torch.save writes it. Input is untrusted: every offset, size and count is checked against
// the archive's size before it is used. Only the directory is read; entry bytes stay where they are.
// Does not own: what the entries mean (torch_checkpoint.h), decompression (none: stored entries only).
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace tpshard {

/// The most central directory entries an archive may list (a torch.save archive holds one per storage
/// plus about five).
constexpr uint64_t kMaxZipEntries = 1000000;

/// One entry, as the central directory and its local header describe it.
struct ZipEntry {
  std::string name;          ///< as stored, e.g. "archive/data/0"
  uint16_t method = 0;       ///< compression method: 0 stored, 8 deflate, ...
  bool encrypted = false;    ///< general purpose flag bit 0
  uint64_t data_offset = 0;  ///< absolute offset of the entry's bytes in the archive
  uint64_t size = 0;         ///< bytes at data_offset (the compressed size)
  uint64_t uncompressed_size = 0;
};

/// The directory of a zip archive of `size` bytes at `data` (a read-only mapping the caller keeps alive).
class ZipArchive {
 public:
  /// Parses the directory. Throws Error naming `path` when: no end of central directory record is found
  /// (not a zip archive), the archive spans several disks, a zip64 locator or record, the central
  /// directory, an entry or its local header lies outside the file, the central directory lists more
  /// entries than fit in it or than kMaxZipEntries, a 0xFFFFFFFF size or offset has no zip64 extra
  /// field, a local header's name differs from the central directory's, a stored entry's sizes differ,
  /// an entry's bytes overlap the central directory, or a name appears twice.
  ZipArchive(const uint8_t* data, uint64_t size, std::string path);

  const std::string& path() const { return path_; }
  const std::vector<ZipEntry>& entries() const { return entries_; }
  /// The entry named exactly `name`, or nullptr.
  const ZipEntry* find(const std::string& name) const;
  /// The bytes of `e` (an entry of this archive) inside the mapping. Throws Error naming the archive, the
  /// entry and the fix when the entry is compressed or encrypted (torch.save stores every entry).
  const uint8_t* stored_bytes(const ZipEntry& e) const;

 private:
  const uint8_t* data_;
  std::string path_;
  std::vector<ZipEntry> entries_;
  std::map<std::string, size_t> by_name_;
};

}  // namespace tpshard
