// fuzz_shard.cpp: a shard file (ShardReader: header, tensor table, placement) and every tensor read
// with its hash verified, then read again without the check (a mutated tensor's bytes still decode).
// The table checksum of the input is recomputed before parsing when the header's table range lies in
// the input: otherwise nearly every mutation of the table stops at the checksum and the table parser
// behind it is never reached. Inputs with the original checksum reach the checksum check as before.
#include <cstdint>
#include <cstring>
#include <string>

#include "format/error.h"
#include "format/hash.h"
#include "format/shard_file.h"
#include "format/shard_layout.h"
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace L = tpshard::layout;
  std::string bytes(reinterpret_cast<const char*>(data), size);
  // the last byte decides (even: recompute), so inputs that keep the stored checksum are fuzzed too
  const bool rehash = size > 0 && (data[size - 1] & 1) == 0;
  if (rehash && size >= L::kHeaderBytes) {
    const auto* h = reinterpret_cast<const uint8_t*>(bytes.data());
    const uint64_t off = L::get_le<uint64_t>(h + L::kOffTableOffset);
    const uint64_t len = L::get_le<uint64_t>(h + L::kOffTableBytes);
    uint64_t end = 0;
    if (L::add_ok(off, len, &end) && end <= size) {
      const uint64_t sum = tpshard::xxh3_64(bytes.data() + off, len);
      std::memcpy(&bytes[L::kOffTableXxh3], &sum, sizeof sum);
    }
  }
  const std::string path =
      tpshard::fuzz::write_input("rank0.tps", reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  try {
    const tpshard::ShardReader r(path);
    for (const auto& t : r.tensors()) {
      if (t.raw_bytes > (64u << 20)) continue;  // the reader checked it against the file; keep runs fast
      for (const bool verify : {true, false}) {
        try {
          (void)r.read_tensor_f32(t.name, verify);
        } catch (const tpshard::Error&) {
        }
      }
    }
  } catch (const tpshard::Error&) {
  }
  return 0;
}
