// answer_normalize.cpp: the official TriviaQA answer normalization and EM/F1 (see answer_normalize.h),
// on Unicode code points with utf8proc supplying categories and simple lower-case mappings.
#include "eval/answer_normalize.h"

#include <algorithm>
#include <map>

#include <utf8proc.h>

#include "tokenizer/utf8.h"

namespace tpshard::eval {
namespace {

utf8proc_category_t category(char32_t c) { return utf8proc_category(static_cast<utf8proc_int32_t>(c)); }

// Python re \w on str: alphanumeric (categories L*, N*) or '_'.
bool is_word_char(char32_t c) {
  if (c < 0x80) return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
  switch (category(c)) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO:
    case UTF8PROC_CATEGORY_ND: case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_NO:
      return true;
    default:
      return false;
  }
}

// Unicode Cased: the cased letter categories, characters with a case mapping (e.g. U+2163 ROMAN
// NUMERAL FOUR, category Nl), and the two Other_Lowercase letters of Latin-1 (U+00AA, U+00BA).
bool is_cased(char32_t c) {
  if (c == 0xAA || c == 0xBA) return true;
  utf8proc_category_t cat = category(c);
  const auto cp = static_cast<utf8proc_int32_t>(c);
  return cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LL || cat == UTF8PROC_CATEGORY_LT ||
         utf8proc_isupper(cp) || utf8proc_islower(cp);
}

// Unicode Case_Ignorable: Mn Me Cf Lm Sk, plus Word_Break MidLetter / MidNumLet / Single_Quote.
bool is_case_ignorable(char32_t c) {
  switch (c) {
    case 0x27: case 0x2E: case 0x3A: case 0xB7: case 0x387: case 0x55F: case 0x5F4: case 0x2018:
    case 0x2019: case 0x2024: case 0x2027: case 0xFE13: case 0xFE52: case 0xFE55: case 0xFF07:
    case 0xFF0E: case 0xFF1A:
      return true;
    default:
      break;
  }
  utf8proc_category_t cat = category(c);
  return cat == UTF8PROC_CATEGORY_MN || cat == UTF8PROC_CATEGORY_ME || cat == UTF8PROC_CATEGORY_CF ||
         cat == UTF8PROC_CATEGORY_LM || cat == UTF8PROC_CATEGORY_SK;
}

// CPython's handle_capital_sigma: U+03A3 lowers to final sigma U+03C2 after a cased letter (skipping
// case-ignorables) when no cased letter follows (skipping case-ignorables); else to U+03C3.
char32_t lower_capital_sigma(const std::u32string& s, size_t i) {
  size_t j = i;
  while (j > 0 && is_case_ignorable(s[j - 1])) --j;
  bool final_sigma = j > 0 && is_cased(s[j - 1]);
  if (final_sigma) {
    size_t k = i + 1;
    while (k < s.size() && is_case_ignorable(s[k])) ++k;
    final_sigma = k == s.size() || !is_cased(s[k]);
  }
  return final_sigma ? 0x3C2 : 0x3C3;
}

// Python str.lower(): simple mappings plus SpecialCasing's unconditional U+0130 and Final_Sigma.
std::u32string python_lower(const std::u32string& s) {
  std::u32string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    char32_t c = s[i];
    if (c == 0x130) {
      out.push_back(U'i');
      out.push_back(0x307);
    } else if (c == 0x3A3) {
      out.push_back(lower_capital_sigma(s, i));
    } else {
      out.push_back(static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c))));
    }
  }
  return out;
}

// string.punctuation plus the four quote-like marks the official script adds.
bool is_official_punct(char32_t c) {
  if (c < 0x80) return (c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x40) || (c >= 0x5B && c <= 0x60) ||
                       (c >= 0x7B && c <= 0x7E);
  return c == 0x2018 || c == 0x2019 || c == 0xB4;
}

// re.sub(r'\b(a|an|the)\b', ' ', s) with Unicode word boundaries.
std::u32string remove_articles(const std::u32string& s) {
  static const std::u32string kArticles[] = {U"the", U"an", U"a"};
  std::u32string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    bool at_boundary = i == 0 || !is_word_char(s[i - 1]);
    size_t matched = 0;
    if (at_boundary) {
      for (const auto& a : kArticles) {
        if (s.compare(i, a.size(), a) == 0 && (i + a.size() == s.size() || !is_word_char(s[i + a.size()]))) {
          matched = a.size();
          break;
        }
      }
    }
    if (matched > 0) {
      out.push_back(U' ');
      i += matched;
    } else {
      out.push_back(s[i++]);
    }
  }
  return out;
}

std::vector<std::u32string> split_python_whitespace(const std::u32string& s) {
  std::vector<std::u32string> words;
  std::u32string cur;
  for (char32_t c : s) {
    if (utf8::is_python_space(c)) {
      if (!cur.empty()) words.push_back(std::move(cur));
      cur.clear();
    } else {
      cur.push_back(c);
    }
  }
  if (!cur.empty()) words.push_back(std::move(cur));
  return words;
}

std::vector<std::string> normalized_tokens(const std::string& text) {
  std::vector<std::string> tokens;
  std::string norm = normalize_answer(text);
  size_t start = 0;
  while (start < norm.size()) {
    size_t end = norm.find(' ', start);
    if (end == std::string::npos) end = norm.size();
    if (end > start) tokens.push_back(norm.substr(start, end - start));
    start = end + 1;
  }
  return tokens;
}

}  // namespace

std::string normalize_answer(const std::string& text) {
  std::u32string s = utf8::decode_lossy(text);
  std::replace(s.begin(), s.end(), U'_', U' ');
  s = python_lower(s);
  for (char32_t& c : s)
    if (is_official_punct(c)) c = U' ';
  s = remove_articles(s);
  std::u32string joined;
  for (const auto& w : split_python_whitespace(s)) {
    if (!joined.empty()) joined.push_back(U' ');
    joined += w;
  }
  return utf8::encode(joined);
}

double exact_match_score(const std::string& prediction, const std::string& ground_truth) {
  return normalize_answer(prediction) == normalize_answer(ground_truth) ? 1.0 : 0.0;
}

double f1_score(const std::string& prediction, const std::string& ground_truth) {
  std::vector<std::string> pred = normalized_tokens(prediction);
  std::vector<std::string> gold = normalized_tokens(ground_truth);
  std::map<std::string, int> gold_counts;
  for (const auto& t : gold) ++gold_counts[t];
  int num_same = 0;
  for (const auto& t : pred) {
    auto it = gold_counts.find(t);
    if (it != gold_counts.end() && it->second > 0) {
      --it->second;
      ++num_same;
    }
  }
  if (num_same == 0) return 0.0;
  double precision = static_cast<double>(num_same) / static_cast<double>(pred.size());
  double recall = static_cast<double>(num_same) / static_cast<double>(gold.size());
  return 2.0 * precision * recall / (precision + recall);
}

AnswerScore score_answer(const std::string& prediction, const std::vector<std::string>& ground_truths) {
  AnswerScore best;
  for (const auto& gt : ground_truths) {
    best.exact_match = std::max(best.exact_match, exact_match_score(prediction, gt));
    best.f1 = std::max(best.f1, f1_score(prediction, gt));
  }
  return best;
}

}  // namespace tpshard::eval
