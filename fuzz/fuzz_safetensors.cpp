// fuzz_safetensors.cpp: a .safetensors file (header and data) opened by SafetensorsFile and every tensor's
// bytes read.
#include <cstdint>
#include <string>

#include "format/error.h"
#include "format/safetensors.h"
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = tpshard::fuzz::write_input("model.safetensors", data, size);
  try {
    tpshard::SafetensorsFile f(path);
    for (const auto& [name, t] : f.tensors()) (void)name, (void)t;
  } catch (const tpshard::Error&) {
  }
  return 0;
}
