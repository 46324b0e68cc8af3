// utf8.h: the one UTF-8 and white-space module of the project (on utf8proc): validation with U+FFFD
// replacement, code point iteration, encoding, the byte-level (GPT-2) byte <-> code point alphabet, the
// tokenizer's character classes (Rust's, as Hugging Face tokenizers uses them) and Python's str semantics
// (isspace, strip, decode with errors="replace") for the chat template, the few-shot prompt and the
// answer normalization. Does not own normalization (normalizers.h) or regex splitting (pre_tokenizers.h).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace tpshard::utf8 {

/// Length in bytes of the well-formed UTF-8 sequence starting at s[i], or 0 when the bytes there
/// are not one (Unicode 15 Table 3-7: no overlongs, no surrogates, nothing above U+10FFFF).
size_t valid_seq_len(std::string_view s, size_t i);

/// s with every ill-formed subsequence replaced by U+FFFD, one per "maximal subpart" (the
/// Unicode/W3C practice that Python's errors="replace" and Rust's from_utf8_lossy follow).
/// Returns s unchanged (no copy made by the caller) when is_valid(s).
std::string sanitize(std::string_view s);
bool is_valid(std::string_view s);

/// Decode the code point at s[i] (s must be valid UTF-8); advances i.
uint32_t next_cp(std::string_view s, size_t& i);
/// Append the UTF-8 encoding of cp.
void append_cp(std::string& out, uint32_t cp);
/// Byte length of the sequence that starts with lead byte b (1 for continuation/invalid bytes).
inline size_t lead_len(unsigned char b) {
  return b < 0x80 ? 1 : (b >> 5) == 0x6 ? 2 : (b >> 4) == 0xE ? 3 : (b >> 3) == 0x1E ? 4 : 1;
}

/// GPT-2 byte-level alphabet (openai/gpt-2 encoder.py bytes_to_unicode): printable bytes map to
/// themselves, the other 68 to U+0100.. in byte order. byte_to_cp(b) is the code point for b;
/// cp_to_byte returns -1 for code points outside the alphabet.
uint32_t byte_to_cp(uint8_t b);
int cp_to_byte(uint32_t cp);

/// Unicode White_Space (Rust char::is_whitespace), used by added-token matching (lstrip, rstrip,
/// single_word) and WhitespaceSplit. Python's str.isspace() differs: is_python_space.
bool is_whitespace(uint32_t cp);
/// Python's str.isspace() for one code point: general category Zs or bidirectional class WS, B or S
/// (CPython's _PyUnicode_IsWhitespace). Unlike White_Space it includes U+001C..U+001F.
bool is_python_space(uint32_t cp);
/// Python's str.strip() with no argument, on UTF-8 text: leading and trailing is_python_space code points
/// removed. Ill-formed bytes are kept as they are (they are never white space).
std::string python_strip(std::string_view s);
/// Python's bytes.decode("utf-8", errors="replace") as code points: one U+FFFD per maximal subpart of
/// an ill-formed sequence (as sanitize).
std::u32string decode_lossy(std::string_view s);
/// UTF-8 encoding of code points (each must be a Unicode scalar value).
std::string encode(const std::u32string& s);
bool is_alnum(uint32_t cp);
bool is_numeric(uint32_t cp);  ///< general category N* (Rust char::is_numeric), used by Digits
/// Rust regex \w (Unicode): letters, marks, Nd, Nl, Pc (incl. '_'), ZWNJ/ZWJ; used by single_word.
bool is_word_char(uint32_t cp);

}  // namespace tpshard::utf8
