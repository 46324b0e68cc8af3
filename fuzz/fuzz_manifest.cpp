// fuzz_manifest.cpp: manifest.json of a model directory (load_manifest), its layouts' range checks, and
// the shard file names it lists.
#include <cstdint>
#include <string>

#include "format/error.h"
#include "fuzz/fuzz_util.h"
#include "model/manifest.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tpshard::fuzz::write_input("manifest.json", data, size);
  const std::string dir = tpshard::fuzz::scratch_dir();
  try {
    const tpshard::Manifest m = tpshard::load_manifest(dir);
    for (const auto& [tp, shards] : m.shards) {
      try {
        tpshard::check_manifest_ranges(m, tp, dir);
      } catch (const tpshard::Error&) {
      }
    }
    for (const auto& [key, shards] : m.pp_shards) {
      try {
        tpshard::check_manifest_ranges(m, key.second, dir, key.first);
      } catch (const tpshard::Error&) {
      }
    }
    (void)tpshard::manifest_layouts_text(m);
  } catch (const tpshard::Error&) {
  }
  return 0;
}
