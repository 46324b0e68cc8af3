// fuzz_tokenizer_encode.cpp: the real tokenizers of the fixtures (GPT-NeoX-20B byte-level BPE, Llama 2
// SentencePiece/Metaspace, the synthetic Metaspace one) encoding arbitrary bytes, and decoding the input
// read as int32 ids.
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "format/error.h"
#include "tokenizer/tokenizer.h"

namespace {

const std::vector<std::unique_ptr<tpshard::Tokenizer>>& tokenizers() {
  static const std::vector<std::unique_ptr<tpshard::Tokenizer>> all = [] {
    std::vector<std::unique_ptr<tpshard::Tokenizer>> v;
    for (const char* name : {"gpt-neox-20b", "llama2", "synthetic-metaspace", "synthetic-bytelevel", "gpt2"})
      v.push_back(tpshard::Tokenizer::load(std::string(TPSHARD_FIXTURES_DIR) + "/tokenizers/" + name));
    return v;
  }();
  return all;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const auto& all = tokenizers();
  const auto& tok = all[data[0] % all.size()];
  if (!tok) return 0;
  const std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
  try {
    const std::vector<int32_t> ids = tok->encode(text, (data[0] & 0x80) != 0);
    (void)tok->decode(ids, (data[0] & 0x40) != 0);
    std::vector<int32_t> raw((size - 1) / 4);
    if (!raw.empty()) std::memcpy(raw.data(), data + 1, raw.size() * 4);
    (void)tok->decode(raw, (data[0] & 0x20) != 0);
  } catch (const tpshard::Error&) {
  }
  return 0;
}
