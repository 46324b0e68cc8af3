// utf8.h: the small UTF-8 helpers the tokenizer needs: validation with U+FFFD replacement,
// code point iteration, encoding, and the byte-level (GPT-2) byte <-> code point alphabet.
// Does not own normalization (utf8proc, normalizers.h) or regex splitting (pre_tokenizers.h).
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

/// White_Space / alphanumeric tests used by added-token matching (lstrip, rstrip, single_word).
bool is_whitespace(uint32_t cp);
bool is_alnum(uint32_t cp);
bool is_numeric(uint32_t cp);  ///< general category N* (Rust char::is_numeric), used by Digits
/// Rust regex \w (Unicode): letters, marks, Nd, Nl, Pc (incl. '_'), ZWNJ/ZWJ; used by single_word.
bool is_word_char(uint32_t cp);

}  // namespace tpshard::utf8
