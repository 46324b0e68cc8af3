// utf8.cpp: UTF-8 validation/replacement, code point helpers and the GPT-2 byte alphabet.
#include "tokenizer/utf8.h"

#include <array>

#include <utf8proc.h>

namespace tpshard::utf8 {

size_t valid_seq_len(std::string_view s, size_t i) {
  const size_t n = s.size();
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) return 1;
  auto at = [&](size_t k) -> int { return i + k < n ? static_cast<unsigned char>(s[i + k]) : -1; };
  auto cont = [](int b) { return b >= 0x80 && b <= 0xBF; };
  if (b0 >= 0xC2 && b0 <= 0xDF) return cont(at(1)) ? 2 : 0;
  if (b0 >= 0xE0 && b0 <= 0xEF) {
    const int b1 = at(1);
    const int lo = b0 == 0xE0 ? 0xA0 : 0x80, hi = b0 == 0xED ? 0x9F : 0xBF;
    if (b1 < lo || b1 > hi) return 0;
    return cont(at(2)) ? 3 : 0;
  }
  if (b0 >= 0xF0 && b0 <= 0xF4) {
    const int b1 = at(1);
    const int lo = b0 == 0xF0 ? 0x90 : 0x80, hi = b0 == 0xF4 ? 0x8F : 0xBF;
    if (b1 < lo || b1 > hi) return 0;
    if (!cont(at(2))) return 0;
    return cont(at(3)) ? 4 : 0;
  }
  return 0;
}

bool is_valid(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    if (static_cast<unsigned char>(s[i]) < 0x80) { ++i; continue; }
    const size_t len = valid_seq_len(s, i);
    if (len == 0) return false;
    i += len;
  }
  return true;
}

// Length of the maximal subpart of an ill-formed sequence at s[i] (>= 1): the longest prefix of a
// well-formed sequence that is present.
static size_t maximal_subpart(std::string_view s, size_t i) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  size_t need = 0;
  int lo = 0x80, hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) need = 1;
  else if (b0 >= 0xE0 && b0 <= 0xEF) { need = 2; if (b0 == 0xE0) lo = 0xA0; if (b0 == 0xED) hi = 0x9F; }
  else if (b0 >= 0xF0 && b0 <= 0xF4) { need = 3; if (b0 == 0xF0) lo = 0x90; if (b0 == 0xF4) hi = 0x8F; }
  else return 1;
  size_t k = 1;
  for (; k <= need && i + k < s.size(); ++k) {
    const int b = static_cast<unsigned char>(s[i + k]);
    const int l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
    if (b < l || b > h) break;
  }
  return k;
}

std::string sanitize(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const size_t len = valid_seq_len(s, i);
    if (len) {
      out.append(s.data() + i, len);
      i += len;
    } else {
      out += "\xEF\xBF\xBD";
      i += maximal_subpart(s, i);
    }
  }
  return out;
}

uint32_t next_cp(std::string_view s, size_t& i) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  const size_t len = lead_len(b0);
  if (len == 1 || i + len > s.size()) { ++i; return b0; }
  uint32_t cp = len == 2 ? (b0 & 0x1F) : len == 3 ? (b0 & 0x0F) : (b0 & 0x07);
  for (size_t k = 1; k < len; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  i += len;
  return cp;
}

void append_cp(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

namespace {
struct ByteAlphabet {
  std::array<uint32_t, 256> to_cp{};
  ByteAlphabet() {
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      to_cp[b] = printable ? static_cast<uint32_t>(b) : next++;
    }
  }
};
const ByteAlphabet& alphabet() {
  static const ByteAlphabet a;
  return a;
}
}  // namespace

uint32_t byte_to_cp(uint8_t b) { return alphabet().to_cp[b]; }

int cp_to_byte(uint32_t cp) {
  if (cp < 256) {
    return alphabet().to_cp[cp] == cp ? static_cast<int>(cp) : -1;
  }
  if (cp < 256 + 68) {
    for (int b = 0; b < 256; ++b)
      if (alphabet().to_cp[b] == cp) return b;
  }
  return -1;
}

bool is_whitespace(uint32_t cp) {
  switch (cp) {
    case 0x09: case 0x0A: case 0x0B: case 0x0C: case 0x0D: case 0x20: case 0x85: case 0xA0:
    case 0x1680: case 0x2028: case 0x2029: case 0x202F: case 0x205F: case 0x3000:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

bool is_python_space(uint32_t cp) {
  if (cp < 0x80) return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20);
  if (cp > 0x10FFFF) return false;
  const utf8proc_property_t* p = utf8proc_get_property(static_cast<utf8proc_int32_t>(cp));
  return p->category == UTF8PROC_CATEGORY_ZS || p->bidi_class == UTF8PROC_BIDI_CLASS_WS ||
         p->bidi_class == UTF8PROC_BIDI_CLASS_B || p->bidi_class == UTF8PROC_BIDI_CLASS_S;
}

std::string python_strip(std::string_view s) {
  // Each code point: its byte range, and whether it is white space (ill-formed bytes: one byte, not space).
  size_t begin = s.size(), end = 0;
  for (size_t i = 0; i < s.size();) {
    const size_t len = valid_seq_len(s, i);
    const size_t start = i;
    bool space = false;
    if (len == 0) {
      ++i;
    } else {
      space = is_python_space(next_cp(s, i));
    }
    if (!space) {
      if (begin == s.size()) begin = start;
      end = i;
    }
  }
  return begin < end ? std::string(s.substr(begin, end - begin)) : std::string();
}

std::u32string decode_lossy(std::string_view s) {
  const std::string valid = is_valid(s) ? std::string(s) : sanitize(s);
  std::u32string out;
  out.reserve(valid.size());
  for (size_t i = 0; i < valid.size();) out.push_back(static_cast<char32_t>(next_cp(valid, i)));
  return out;
}

std::string encode(const std::u32string& s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) append_cp(out, static_cast<uint32_t>(c));
  return out;
}

bool is_alnum(uint32_t cp) {
  if (cp < 128) return (cp >= '0' && cp <= '9') || ((cp | 0x20) >= 'a' && (cp | 0x20) <= 'z');
  const auto c = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
  return (c >= UTF8PROC_CATEGORY_LU && c <= UTF8PROC_CATEGORY_LO) ||
         (c >= UTF8PROC_CATEGORY_ND && c <= UTF8PROC_CATEGORY_NO);
}

bool is_numeric(uint32_t cp) {
  if (cp < 128) return cp >= '0' && cp <= '9';
  const auto c = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
  return c >= UTF8PROC_CATEGORY_ND && c <= UTF8PROC_CATEGORY_NO;
}

bool is_word_char(uint32_t cp) {
  if (cp < 128) return cp == '_' || is_alnum(cp);
  if (cp == 0x200C || cp == 0x200D) return true;
  const auto c = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
  return (c >= UTF8PROC_CATEGORY_LU && c <= UTF8PROC_CATEGORY_ND) || c == UTF8PROC_CATEGORY_NL ||
         c == UTF8PROC_CATEGORY_PC;
}

}  // namespace tpshard::utf8
