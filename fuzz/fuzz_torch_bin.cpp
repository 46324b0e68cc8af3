// fuzz_torch_bin.cpp: a pytorch_model.bin (torch.save's zip archive) opened by TorchCheckpointFile (zip
// directory, restricted unpickler, storages and views) and every tensor's bytes read.
#include <cstdint>
#include <string>

#include "format/error.h"
#include "format/torch_checkpoint.h"
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = tpshard::fuzz::write_input("pytorch_model.bin", data, size);
  try {
    tpshard::TorchCheckpointFile f(path);
    uint64_t sum = 0;  // read every byte a tensor claims, so an extent past the mapping faults here
    for (const auto& [name, t] : f.tensors())
      for (uint64_t k = 0; k < t.bytes; ++k) sum += t.data[k];
    volatile uint64_t sink = sum;
    (void)sink;
  } catch (const tpshard::Error&) {
  }
  return 0;
}
