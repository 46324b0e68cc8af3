// fuzz_torch_bin.cpp: a pytorch_model.bin (torch.save's zip archive) opened by TorchCheckpointFile (zip
// directory, restricted unpickler, storages and views) and every tensor's bytes read.
#include <algorithm>
#include <cstdint>
#include <set>
#include <string>
#include <utility>

#include "format/error.h"
#include "format/torch_checkpoint.h"
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = tpshard::fuzz::write_input("pytorch_model.bin", data, size);
  try {
    tpshard::TorchCheckpointFile f(path);
    // Read every byte a tensor claims, so an extent past the mapping faults here; each byte once (views
    // and tied names overlap).
    std::set<std::pair<const uint8_t*, const uint8_t*>> extents;
    for (const auto& [name, t] : f.tensors()) extents.insert({t.data, t.data + t.bytes});
    uint64_t sum = 0;
    const uint8_t* done = nullptr;
    for (const auto& [b, e] : extents)
      for (const uint8_t* p = std::max(b, done ? done : b); p < e; ++p, done = p) sum += *p;
    volatile uint64_t sink = sum;
    (void)sink;
  } catch (const tpshard::Error&) {
  }
  return 0;
}
