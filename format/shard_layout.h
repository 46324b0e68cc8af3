// shard_layout.h: byte-level constants and little-endian helpers of the shard file format, shared by
// shard_reader.cpp and shard_writer.cpp. Mirrors docs/FORMAT.md sections "Header" and "Tensor table".
#pragma once
#include <cstdint>
#include <cstring>
#include <string>

namespace tpshard::layout {

/// "\x89TPS\r\n\x1a\n": high-bit first byte (not ASCII / not UTF-8 text), CRLF and LF catch newline
/// translation, ^Z stops DOS `type` (same reasoning as PNG's signature).
constexpr uint8_t kMagic[8] = {0x89, 'T', 'P', 'S', '\r', '\n', 0x1a, '\n'};
constexpr uint32_t kVersion = 1;
constexpr uint64_t kHeaderBytes = 80;       ///< fixed header; the table starts right after it
constexpr uint64_t kMaxNameBytes = 1024;
constexpr uint32_t kMaxDims = 8;
/// Smallest table record: u16 name_len + 1 name byte + 4 u8 + i32 axis + 2 dims (1 axis) + 5 u64.
constexpr uint64_t kMinRecordBytes = 2 + 1 + 4 + 4 + 16 + 40;

// Header field offsets.
constexpr size_t kOffVersion = 8, kOffTpRank = 12, kOffTpSize = 16, kOffCount = 20, kOffTableOffset = 24,
                 kOffTableBytes = 32, kOffDataOffset = 40, kOffDataBytes = 48, kOffArenaBytes = 56,
                 kOffTableXxh3 = 64, kOffReserved = 72;

inline uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

inline void put_u16(std::string& s, uint16_t v) { s.append(reinterpret_cast<const char*>(&v), 2); }
inline void put_u32(std::string& s, uint32_t v) { s.append(reinterpret_cast<const char*>(&v), 4); }
inline void put_u64(std::string& s, uint64_t v) { s.append(reinterpret_cast<const char*>(&v), 8); }
inline void put_u8(std::string& s, uint8_t v) { s.push_back(static_cast<char>(v)); }
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "tpshard assumes a little-endian host");

template <typename T>
T get_le(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

/// a*b and a+b with overflow detection (false on overflow).
inline bool mul_ok(uint64_t a, uint64_t b, uint64_t* out) { return !__builtin_mul_overflow(a, b, out); }
inline bool add_ok(uint64_t a, uint64_t b, uint64_t* out) { return !__builtin_add_overflow(a, b, out); }

}  // namespace tpshard::layout
