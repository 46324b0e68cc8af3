// fuzz_jsonl.cpp: the JSONL files tprun reads: generate --input records (with a real tokenizer), TriviaQA
// records, and an existing results file being resumed.
#include <cstdint>
#include <memory>
#include <string>

#include "eval/generate_jsonl.h"
#include "eval/resumable_jsonl.h"
#include "eval/triviaqa_data.h"
#include "format/error.h"
#include "fuzz/fuzz_util.h"
#include "tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::unique_ptr<tpshard::Tokenizer> tok =
      tpshard::Tokenizer::load(std::string(TPSHARD_FIXTURES_DIR) + "/tokenizers/gpt2");
  const std::string path = tpshard::fuzz::write_input("input.jsonl", data, size);
  try {
    (void)tpshard::eval::read_generate_jsonl(path, *tok, tpshard::SamplingParams{}, 2048, 4096,
                                             tpshard::eval::BadRecordPolicy::Skip, false);
  } catch (const tpshard::Error&) {
  }
  try {
    (void)tpshard::eval::load_triviaqa(path);
  } catch (const tpshard::Error&) {
  }
  try {
    (void)tpshard::eval::read_jsonl_results(path);
  } catch (const tpshard::Error&) {
  }
  return 0;
}
