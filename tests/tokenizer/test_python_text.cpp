// test_python_text.cpp: Python's str semantics in tokenizer/utf8.h against CPython 3.11's own answers
// (computed with `chr(c).isspace()` over every code point, `bytes.decode("utf-8", "replace")` and
// `str.strip()`; the literals below are CPython's output): is_python_space, decode_lossy, python_strip.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "tokenizer/utf8.h"

using namespace tpshard;

TEST_CASE("is_python_space: exactly the 29 code points for which CPython's str.isspace() is true") {
  const std::vector<uint32_t> python = {0x9,    0xa,    0xb,    0xc,    0xd,    0x1c,   0x1d,   0x1e,
                                        0x1f,   0x20,   0x85,   0xa0,   0x1680, 0x2000, 0x2001, 0x2002,
                                        0x2003, 0x2004, 0x2005, 0x2006, 0x2007, 0x2008, 0x2009, 0x200a,
                                        0x2028, 0x2029, 0x202f, 0x205f, 0x3000};
  std::vector<uint32_t> ours;
  for (uint32_t cp = 0; cp < 0x110000; ++cp)
    if (utf8::is_python_space(cp)) ours.push_back(cp);
  CHECK(ours == python);
  // The tokenizer's White_Space (Rust) leaves out U+001C..U+001F, Python's includes them.
  CHECK_FALSE(utf8::is_whitespace(0x1c));
}

TEST_CASE("decode_lossy: one U+FFFD per maximal subpart, as bytes.decode('utf-8', 'replace')") {
  auto cps = [](const std::string& bytes) {
    const std::u32string s = utf8::decode_lossy(bytes);
    return std::vector<uint32_t>(s.begin(), s.end());
  };
  CHECK(cps("a\xe2\x82x") == std::vector<uint32_t>{0x61, 0xfffd, 0x78});         // truncated 3-byte sequence
  CHECK(cps("\xf0\x9f\x98") == std::vector<uint32_t>{0xfffd});                     // truncated 4-byte sequence
  CHECK(cps("\xed\xa0\x80z") == std::vector<uint32_t>{0xfffd, 0xfffd, 0xfffd, 0x7a});  // a surrogate
  CHECK(cps("\xc0\xafq") == std::vector<uint32_t>{0xfffd, 0xfffd, 0x71});          // an overlong form
  CHECK(cps("\xf4\x90\x80\x80") == std::vector<uint32_t>{0xfffd, 0xfffd, 0xfffd, 0xfffd});  // above U+10FFFF
  CHECK(cps("\xe2\x82\xac\xff") == std::vector<uint32_t>{0x20ac, 0xfffd});
  CHECK(utf8::encode(utf8::decode_lossy("caf\xc3\xa9")) == "caf\xc3\xa9");
}

TEST_CASE("python_strip: str.strip() on UTF-8, ill-formed bytes kept") {
  CHECK(utf8::python_strip("\x1c\x1d ab c\x1f\xe3\x80\x80") == "ab c");  // CPython: 'ab c'
  CHECK(utf8::python_strip("\xc2\x85\xc2\xa0 Niger\t\n") == "Niger");
  CHECK(utf8::python_strip(" \xff x \xff ") == "\xff x \xff");
  CHECK(utf8::python_strip(" \t\xe2\x80\xa8 ").empty());
  CHECK(utf8::python_strip("") == "");
}
