// fewshot_prompt.cpp: few-shot prompt construction and answer extraction (see fewshot_prompt.h).
#include "eval/fewshot_prompt.h"

namespace tpshard::eval {
namespace {

// Length in bytes of a white-space code point at s[i] (ASCII space/controls, U+0085, U+00A0, U+1680,
// U+2000..U+200A, U+2028, U+2029, U+202F, U+205F, U+3000), or 0.
size_t space_len(const std::string& s, size_t i) {
  auto b = [&](size_t k) { return i + k < s.size() ? static_cast<unsigned char>(s[i + k]) : 0u; };
  unsigned c0 = b(0);
  if (c0 == ' ' || (c0 >= 0x09 && c0 <= 0x0D)) return 1;
  if (c0 == 0xC2 && (b(1) == 0x85 || b(1) == 0xA0)) return 2;
  if (c0 == 0xE1 && b(1) == 0x9A && b(2) == 0x80) return 3;
  if (c0 == 0xE2 && b(1) == 0x80 && (b(2) <= 0x8A || b(2) == 0xA8 || b(2) == 0xA9 || b(2) == 0xAF)) return 3;
  if (c0 == 0xE2 && b(1) == 0x81 && b(2) == 0x9F) return 3;
  if (c0 == 0xE3 && b(1) == 0x80 && b(2) == 0x80) return 3;
  return 0;
}

// Length of the white-space code point that ends just before byte `end`, or 0.
size_t space_len_before(const std::string& s, size_t end) {
  for (size_t n = 1; n <= 3 && n <= end; ++n)
    if (space_len(s, end - n) == n) return n;
  return 0;
}

}  // namespace

std::string build_fewshot_prompt(const std::vector<TriviaQaRecord>& shots, const std::string& question) {
  std::string p;
  for (const auto& s : shots) p += "Question: " + s.question + "\nAnswer: " + s.answer + "\n\n";
  p += "Question: " + question + "\nAnswer:";
  return p;
}

std::string extract_answer(const std::string& generated) {
  std::string line = generated.substr(0, generated.find('\n'));
  size_t begin = 0;
  while (size_t n = space_len(line, begin)) begin += n;
  size_t end = line.size();
  while (end > begin) {
    size_t n = space_len_before(line, end);
    if (n == 0) break;
    end -= n;
  }
  return line.substr(begin, end - begin);
}

}  // namespace tpshard::eval
