// torch_archive_builder.h: builds torch.save-style archives byte by byte for the .bin reader's tests
// (no Python): PickleWriter emits pickle opcodes (pickletools' names), ZipWriter writes stored entries
// with the end records torch.save writes (zip64 ones included), and state_dict_pickle / torch_archive
// put a whole checkpoint together the way torch.save lays it out. Offsets of the records are kept so a
// test can damage exactly one field.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace tpshard::test {

/// A pickle, one opcode per call.
struct PickleWriter {
  std::string b;
  PickleWriter& raw(const std::string& s) { b += s; return *this; }
  PickleWriter& op(uint8_t o) { b.push_back(static_cast<char>(o)); return *this; }
  PickleWriter& u32(uint32_t v) { b.append(reinterpret_cast<const char*>(&v), 4); return *this; }
  PickleWriter& u64(uint64_t v) { b.append(reinterpret_cast<const char*>(&v), 8); return *this; }
  PickleWriter& proto(uint8_t v = 2) { return op(0x80).op(v); }
  PickleWriter& global(const std::string& module, const std::string& name) { return op('c').raw(module + "\n" + name + "\n"); }
  PickleWriter& str(const std::string& s) { return op('X').u32(static_cast<uint32_t>(s.size())).raw(s); }  // BINUNICODE
  PickleWriter& integer(int64_t v) {
    if (v >= 0 && v < 256) return op('K').op(static_cast<uint8_t>(v));
    if (v >= INT32_MIN && v <= INT32_MAX) return op('J').u32(static_cast<uint32_t>(static_cast<int32_t>(v)));
    op(0x8a).op(8);  // LONG1, 8 bytes
    return u64(static_cast<uint64_t>(v));
  }
  PickleWriter& ints(const std::vector<int64_t>& v) {  // a tuple, as torch.save writes sizes and strides
    if (v.empty()) return op(')');
    if (v.size() > 3) mark();
    for (int64_t x : v) integer(x);
    return v.size() == 1 ? op(0x85) : v.size() == 2 ? op(0x86) : v.size() == 3 ? op(0x87) : op('t');
  }
  PickleWriter& mark() { return op('('); }
  PickleWriter& tuple() { return op('t'); }
  PickleWriter& reduce() { return op('R'); }
  PickleWriter& stop() { return op('.'); }
};

/// One tensor of a state dict: torch.<cls> storage `key` of `numel` elements, viewed from `offset` with
/// `sizes` / `strides`.
struct TensorSpec {
  std::string name, cls, key;
  int64_t numel, offset;
  std::vector<int64_t> sizes, strides;
};

/// _rebuild_tensor_v2((persistent storage), offset, sizes, strides, False, OrderedDict()) as torch.save writes it.
inline void rebuild_tensor(PickleWriter& p, const TensorSpec& t) {
  p.global("torch._utils", "_rebuild_tensor_v2").mark();
  p.mark().str("storage").global("torch", t.cls).str(t.key).str("cpu").integer(t.numel).tuple().op('Q');  // BINPERSID
  p.integer(t.offset).ints(t.sizes).ints(t.strides).op(0x89);  // NEWFALSE
  p.global("collections", "OrderedDict").op(')').reduce();
  p.tuple().reduce();
}

/// PROTO 2, OrderedDict(), MARK, (name, tensor)..., SETITEMS, STOP.
inline std::string state_dict_pickle(const std::vector<TensorSpec>& ts) {
  PickleWriter p;
  p.proto().global("collections", "OrderedDict").op(')').reduce().mark();
  for (const TensorSpec& t : ts) {
    p.str(t.name);
    rebuild_tensor(p, t);
  }
  return p.op('u').stop().b;
}

/// A zip archive of stored entries (CRC fields left 0: the reader does not check them).
struct ZipWriter {
  struct Entry {
    std::string name, bytes;
    uint16_t method = 0;
  };
  std::vector<Entry> entries;
  bool zip64 = true;  ///< write the zip64 end record and locator, as torch.save does
  // Filled by build(): where the records landed.
  uint64_t cd_offset = 0, eocd_offset = 0, zip64_eocd_offset = 0;
  std::vector<uint64_t> local_offsets;

  ZipWriter& add(const std::string& name, const std::string& bytes, uint16_t method = 0) {
    entries.push_back({name, bytes, method});
    return *this;
  }
  std::string build() {
    std::string z, cd;
    auto u16 = [](std::string& s, uint16_t v) { s.append(reinterpret_cast<const char*>(&v), 2); };
    auto u32 = [](std::string& s, uint32_t v) { s.append(reinterpret_cast<const char*>(&v), 4); };
    auto u64 = [](std::string& s, uint64_t v) { s.append(reinterpret_cast<const char*>(&v), 8); };
    local_offsets.clear();
    for (const Entry& e : entries) {
      const uint64_t local = z.size();
      local_offsets.push_back(local);
      // Pad the data to 64 bytes with an extra field (id 0x4246, as torch.save aligns its storages).
      const uint64_t unpadded = local + 30 + e.name.size() + 4;
      const uint16_t pad = static_cast<uint16_t>((64 - unpadded % 64) % 64);
      u32(z, 0x04034b50); u16(z, 20); u16(z, 0x0800); u16(z, e.method); u16(z, 0); u16(z, 0);
      u32(z, 0); u32(z, static_cast<uint32_t>(e.bytes.size())); u32(z, static_cast<uint32_t>(e.bytes.size()));
      u16(z, static_cast<uint16_t>(e.name.size())); u16(z, static_cast<uint16_t>(4 + pad));
      z += e.name;
      u16(z, 0x4246); u16(z, pad);
      z.append(pad, 'Z');
      z += e.bytes;
      u32(cd, 0x02014b50); u16(cd, 20); u16(cd, 20); u16(cd, 0x0800); u16(cd, e.method); u16(cd, 0); u16(cd, 0);
      u32(cd, 0); u32(cd, static_cast<uint32_t>(e.bytes.size())); u32(cd, static_cast<uint32_t>(e.bytes.size()));
      u16(cd, static_cast<uint16_t>(e.name.size())); u16(cd, 0); u16(cd, 0); u16(cd, 0); u16(cd, 0); u32(cd, 0);
      u32(cd, static_cast<uint32_t>(local));
      cd += e.name;
    }
    cd_offset = z.size();
    z += cd;
    const uint64_t n = entries.size();
    if (zip64) {
      zip64_eocd_offset = z.size();
      u32(z, 0x06064b50); u64(z, 44); u16(z, 45); u16(z, 45); u32(z, 0); u32(z, 0);
      u64(z, n); u64(z, n); u64(z, cd.size()); u64(z, cd_offset);
      u32(z, 0x07064b50); u32(z, 0); u64(z, zip64_eocd_offset); u32(z, 1);
    }
    eocd_offset = z.size();
    u32(z, 0x06054b50); u16(z, 0); u16(z, 0);
    u16(z, zip64 ? 0xFFFF : static_cast<uint16_t>(n)); u16(z, zip64 ? 0xFFFF : static_cast<uint16_t>(n));
    u32(z, zip64 ? 0xFFFFFFFFu : static_cast<uint32_t>(cd.size())); u32(z, zip64 ? 0xFFFFFFFFu : static_cast<uint32_t>(cd_offset));
    u16(z, 0);
    return z;
  }
};

/// A torch.save archive under top folder `top`: data.pkl, byteorder "little", data/<key> per storage.
inline ZipWriter torch_archive(const std::string& pickle, const std::map<std::string, std::string>& storages,
                               const std::string& top = "archive") {
  ZipWriter z;
  z.add(top + "/data.pkl", pickle).add(top + "/byteorder", "little");
  for (const auto& [key, bytes] : storages) z.add(top + "/data/" + key, bytes);
  z.add(top + "/version", "3\n");
  return z;
}

}  // namespace tpshard::test
