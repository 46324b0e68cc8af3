// fuzz_tokenizer_json.cpp: tokenizer.json from the input (Tokenizer::load of a directory holding only
// it), then encode and decode of fixed texts and ids. Errors are answers; crashes, hangs, out-of-bounds
// accesses and huge allocations are findings.
#include <cstdint>
#include <string>
#include <vector>

#include "format/error.h"
#include "fuzz/fuzz_util.h"
#include "tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tpshard::fuzz::write_input("tokenizer.json", data, size);
  try {
    auto tok = tpshard::Tokenizer::load(tpshard::fuzz::scratch_dir());
    if (!tok) return 0;
    for (const char* text : {"Hello world", " a  b\n\tc", "\xe2\x96\x81x\xf0\x9f\x98\x80", "", "12345 ab'cd"}) {
      const std::vector<int32_t> ids = tok->encode(text, true);
      (void)tok->decode(ids, false);
    }
    (void)tok->decode({0, 1, 2, 3, 255, 256, -1, 1 << 30}, true);
  } catch (const tpshard::Error&) {
  }
  return 0;
}
