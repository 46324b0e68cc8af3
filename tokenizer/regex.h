// regex.h: a compiled PCRE2 pattern (UTF + UCP, JIT when available) for the split patterns of
// tokenizer.json (written for Oniguruma; the constructs they use mean the same in PCRE2).
// Owns only matching; what to do with the matches is pre_tokenizers.h's job.
#pragma once
#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tpshard {

class Regex {
 public:
  /// Throws Error naming `where` and the PCRE2 message when the pattern does not compile.
  Regex(const std::string& pattern, const std::string& where);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  /// Byte spans [begin, end) of all non-overlapping, non-empty matches in s, left to right.
  /// s must be valid UTF-8 (the tokenizer sanitizes input first; no UTF check is repeated).
  void find_all(std::string_view s, std::vector<std::pair<size_t, size_t>>& spans) const;

  /// PCRE2-escaped literal (for Split/Replace patterns given as {"String": ...}).
  static std::string escape(std::string_view literal);

 private:
  void* code_ = nullptr;  // pcre2_code_8*
};

}  // namespace tpshard
