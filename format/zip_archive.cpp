// zip_archive.cpp: ZipArchive. Record layouts (little-endian) from PKWARE's APPNOTE.TXT 6.3:
//   end of central directory (EOCD), 22 bytes + comment: sig 0x06054b50, u16 disk, u16 cd_disk,
//     u16 entries_on_disk, u16 entries, u32 cd_size, u32 cd_offset, u16 comment_len
//   zip64 EOCD locator, 20 bytes, right before the EOCD: sig 0x07064b50, u32 disk, u64 record_offset,
//     u32 disks
//   zip64 EOCD record, 56 bytes + extensible data: sig 0x06064b50, u64 record_size, u16 made_by,
//     u16 needed, u32 disk, u32 cd_disk, u64 entries_on_disk, u64 entries, u64 cd_size, u64 cd_offset
//   central directory header, 46 bytes + name + extra + comment: sig 0x02014b50, u16 made_by,
//     u16 needed, u16 flags, u16 method, u16 time, u16 date, u32 crc, u32 csize, u32 usize,
//     u16 name_len, u16 extra_len, u16 comment_len, u16 disk, u16 int_attr, u32 ext_attr, u32 local_offset
//   zip64 extended information extra field (id 0x0001): u64 usize, u64 csize, u64 local_offset,
//     u32 disk, each present only when its 32-bit field above is 0xFFFFFFFF (0xFFFF for the disk)
//   local file header, 30 bytes + name + extra, then the entry's bytes: sig 0x04034b50, u16 needed,
//     u16 flags, u16 method, u16 time, u16 date, u32 crc, u32 csize, u32 usize, u16 name_len, u16 extra_len
#include "format/zip_archive.h"

#include <algorithm>

#include "format/error.h"
#include "format/shard_layout.h"

namespace tpshard {

namespace {

constexpr uint32_t kEocdSig = 0x06054b50, kZip64LocatorSig = 0x07064b50, kZip64EocdSig = 0x06064b50,
                   kCentralSig = 0x02014b50, kLocalSig = 0x04034b50;
constexpr uint64_t kEocdBytes = 22, kZip64LocatorBytes = 20, kZip64EocdBytes = 56, kCentralBytes = 46,
                   kLocalBytes = 30;
constexpr uint32_t k32 = 0xFFFFFFFFu;
const char* kCorrupt = "the file is corrupt or truncated: download it again";

uint16_t u16(const uint8_t* p) { return layout::get_le<uint16_t>(p); }
uint32_t u32(const uint8_t* p) { return layout::get_le<uint32_t>(p); }
uint64_t u64(const uint8_t* p) { return layout::get_le<uint64_t>(p); }

/// Whether [off, off + n) lies inside [0, limit), without overflow.
bool inside(uint64_t off, uint64_t n, uint64_t limit) { return off <= limit && n <= limit - off; }

}  // namespace

ZipArchive::ZipArchive(const uint8_t* data, uint64_t size, std::string path) : data_(data), path_(std::move(path)) {
  const std::string& P = path_;
  auto fail = [&](const std::string& what) -> void { throw Error(P + ": zip archive: " + what, kCorrupt); };
  // 1. The EOCD: the last signature whose record and comment fit in the file (the comment is at most 65535 bytes).
  if (size < kEocdBytes) throw Error(P + ": " + std::to_string(size) + " bytes, too short for a zip archive", kCorrupt);
  uint64_t eocd = UINT64_MAX;
  const uint64_t lowest = size - kEocdBytes > 0xFFFF ? size - kEocdBytes - 0xFFFF : 0;
  for (uint64_t p = size - kEocdBytes + 1; p-- > lowest;)
    if (u32(data + p) == kEocdSig && p + kEocdBytes + u16(data + p + 20) <= size) {
      eocd = p;
      break;
    }
  if (eocd == UINT64_MAX) throw Error(P + ": no zip end of central directory record: not a zip archive, or truncated", kCorrupt);
  const uint8_t* e = data + eocd;
  uint64_t disk = u16(e + 4), cd_disk = u16(e + 6), on_disk = u16(e + 8), count = u16(e + 10), cd_size = u32(e + 12),
           cd_offset = u32(e + 16);
  uint64_t cd_limit = eocd;  // the central directory ends before the records that describe it
  // 2. zip64: a locator right before the EOCD points at the zip64 EOCD record, whose fields replace the EOCD's.
  if (eocd >= kZip64LocatorBytes && u32(data + eocd - kZip64LocatorBytes) == kZip64LocatorSig) {
    const uint8_t* loc = data + eocd - kZip64LocatorBytes;
    const uint64_t rec = u64(loc + 8);
    if (u32(loc + 4) != 0 || u32(loc + 16) > 1) fail("the zip64 locator names another disk (multi-part archives are not read)");
    if (!inside(rec, kZip64EocdBytes, eocd - kZip64LocatorBytes))
      fail("the zip64 end of central directory record at offset " + std::to_string(rec) + " is outside the file");
    const uint8_t* z = data + rec;
    if (u32(z) != kZip64EocdSig) fail("no zip64 end of central directory record at offset " + std::to_string(rec));
    disk = u32(z + 16);
    cd_disk = u32(z + 20);
    on_disk = u64(z + 24);
    count = u64(z + 32);
    cd_size = u64(z + 40);
    cd_offset = u64(z + 48);
    cd_limit = rec;
  }
  if (disk != 0 || cd_disk != 0 || on_disk != count) fail("the archive spans several disks (multi-part archives are not read)");
  if (!inside(cd_offset, cd_size, cd_limit))
    fail("the central directory (offset " + std::to_string(cd_offset) + ", " + std::to_string(cd_size) +
         " bytes) is outside the file or overlaps its end records (" + std::to_string(cd_limit) + " bytes before them)");
  if (count > cd_size / kCentralBytes)
    fail("the end record lists " + std::to_string(count) + " entries, more than " + std::to_string(cd_size) +
         " bytes of central directory hold");
  if (count > kMaxZipEntries)
    fail(std::to_string(count) + " entries, more than the limit of " + std::to_string(kMaxZipEntries));
  // 3. The central directory, and each entry's local header.
  entries_.reserve(static_cast<size_t>(count));
  const uint64_t cd_end = cd_offset + cd_size;
  uint64_t p = cd_offset;
  for (uint64_t i = 0; i < count; ++i) {
    const std::string at = "central directory entry " + std::to_string(i) + " (offset " + std::to_string(p) + ")";
    if (!inside(p, kCentralBytes, cd_end) || u32(data + p) != kCentralSig) fail(at + ": no central directory header there");
    const uint8_t* c = data + p;
    const uint16_t flags = u16(c + 8), method = u16(c + 10), name_len = u16(c + 28), extra_len = u16(c + 30),
                   comment_len = u16(c + 32), start_disk = u16(c + 34);
    uint64_t csize = u32(c + 20), usize = u32(c + 24), local = u32(c + 42);
    const uint64_t rec_bytes = kCentralBytes + name_len + extra_len + comment_len;
    if (!inside(p, rec_bytes, cd_end)) fail(at + ": its name, extra field or comment runs past the central directory");
    ZipEntry z;
    z.name.assign(reinterpret_cast<const char*>(c + kCentralBytes), name_len);
    const std::string E = "entry '" + z.name + "'";
    // zip64 extended information: the fields that are 0xFFFFFFFF in the header, in this order.
    const bool need_u = usize == k32, need_c = csize == k32, need_l = local == k32, need_d = start_disk == 0xFFFF;
    bool have_zip64 = false;
    for (uint64_t x = 0; x + 4 <= extra_len;) {
      const uint8_t* f = c + kCentralBytes + name_len + x;
      const uint16_t id = u16(f), len = u16(f + 2);
      if (x + 4 + len > extra_len) fail(E + ": an extra field runs past the extra area");
      if (id == 0x0001) {
        uint64_t q = 4;
        auto take = [&](uint64_t* v, unsigned bytes) {
          if (q + bytes > 4u + len) fail(E + ": the zip64 extra field is too short for the sizes it must hold");
          *v = bytes == 8 ? u64(f + q) : u32(f + q);
          q += bytes;
        };
        uint64_t d = 0;
        if (need_u) take(&usize, 8);
        if (need_c) take(&csize, 8);
        if (need_l) take(&local, 8);
        if (need_d) take(&d, 4);
        if (need_d && d != 0) fail(E + ": starts on another disk (multi-part archives are not read)");
        have_zip64 = true;
      }
      x += 4u + len;
    }
    if ((need_u || need_c || need_l || need_d) && !have_zip64) fail(E + ": a size or offset is 0xFFFFFFFF but there is no zip64 extra field");
    if (!need_d && start_disk != 0) fail(E + ": starts on another disk (multi-part archives are not read)");
    if (method == 0 && csize != usize)
      fail(E + ": stored (not compressed), yet its sizes differ (" + std::to_string(csize) + " and " + std::to_string(usize) + ")");
    if (!inside(local, kLocalBytes, size) || u32(data + local) != kLocalSig)
      fail(E + ": no local file header at offset " + std::to_string(local));
    const uint8_t* l = data + local;
    const uint64_t lname = u16(l + 26), lextra = u16(l + 28);
    if (!inside(local, kLocalBytes + lname + lextra, size)) fail(E + ": its local header runs past the end of the file");
    if (lname != name_len || std::string(reinterpret_cast<const char*>(l + kLocalBytes), lname) != z.name)
      fail(E + ": the local header at offset " + std::to_string(local) + " names another entry");
    z.method = method;
    z.encrypted = (flags & 1u) != 0;
    z.data_offset = local + kLocalBytes + lname + lextra;
    z.size = csize;
    z.uncompressed_size = usize;
    if (!inside(z.data_offset, z.size, cd_offset))
      fail(E + ": its " + std::to_string(z.size) + " bytes at offset " + std::to_string(z.data_offset) +
           " run past the start of the central directory (offset " + std::to_string(cd_offset) + ")");
    if (!by_name_.emplace(z.name, entries_.size()).second) fail(E + " appears twice");
    entries_.push_back(std::move(z));
    p += rec_bytes;
  }
}

const ZipEntry* ZipArchive::find(const std::string& name) const {
  const auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &entries_[it->second];
}

const uint8_t* ZipArchive::stored_bytes(const ZipEntry& e) const {
  if (e.encrypted)
    throw Error(path_ + ": entry '" + e.name + "' is encrypted",
                "torch.save writes no encrypted entries: re-save the checkpoint with torch.save, or as safetensors "
                "(model.save_pretrained(dir, safe_serialization=True))");
  if (e.method != 0)
    throw Error(path_ + ": entry '" + e.name + "' is compressed (zip method " + std::to_string(e.method) +
                    (e.method == 8 ? ", deflate" : "") + "); tpshard maps entries in place and reads stored ones only",
                "torch.save stores every entry uncompressed: re-save the checkpoint with torch.save (do not re-zip it), "
                "or as safetensors (model.save_pretrained(dir, safe_serialization=True))");
  return data_ + e.data_offset;
}

}  // namespace tpshard
