// lexer.cpp: template text -> tokens (jinja2's lexer rules with trim_blocks and lstrip_blocks on).
#include "runtime/jinja/lexer.h"

#include <cstring>

#include "format/error.h"
#include "runtime/jinja/value.h"

namespace tpshard::jinja {
namespace {

/// Length of the UTF-8 whitespace code point at s[i] (Python str.isspace), 0 if none.
size_t space_len(const std::string& s, size_t i) {
  const auto b = static_cast<unsigned char>(s[i]);
  if (b < 0x80) return text::is_space(b) ? 1 : 0;
  size_t len = (b >> 5) == 0x6 ? 2 : (b >> 4) == 0xE ? 3 : 0;
  if (len == 0 || i + len > s.size()) return 0;
  const std::vector<uint32_t> cp = text::decode(s.substr(i, len));
  return cp.size() == 1 && text::is_space(cp[0]) ? len : 0;
}

/// Python str.rstrip(): s without trailing whitespace.
std::string rstrip(const std::string& s) {
  std::vector<uint32_t> cps = text::decode(s);
  while (!cps.empty() && text::is_space(cps.back())) cps.pop_back();
  return text::encode(cps);
}

/// True when s is non-empty and all whitespace (Python's \s+ fullmatch).
bool all_space(const std::string& s) {
  if (s.empty()) return false;
  for (uint32_t cp : text::decode(s))
    if (!text::is_space(cp)) return false;
  return true;
}

class Lexer {
 public:
  Lexer(const std::string& t, const std::string& source) : source_(source) {
    // jinja2: every \r\n and \r becomes \n, and a single trailing newline is dropped (keep_trailing_newline=False).
    src_.reserve(t.size());
    for (size_t i = 0; i < t.size(); ++i) {
      if (t[i] == '\r') {
        src_ += '\n';
        if (i + 1 < t.size() && t[i + 1] == '\n') ++i;
      } else {
        src_ += t[i];
      }
    }
    if (!src_.empty() && src_.back() == '\n') src_.pop_back();
  }

  std::vector<Token> run() {
    bool line_starting = true;
    while (pos_ < src_.size()) {
      size_t open = find_open(pos_);
      if (open == std::string::npos) {
        push_text(src_.substr(pos_));
        pos_ = src_.size();
        break;
      }
      std::string text = src_.substr(pos_, open - pos_);
      const char kind = src_[open + 1];
      const char sign = open + 2 < src_.size() && (src_[open + 2] == '-' || src_[open + 2] == '+') ? src_[open + 2] : 0;
      if (sign == '-') {
        text = rstrip(text);
      } else if (sign != '+' && kind != '{') {  // lstrip_blocks: block and comment tags only
        const size_t nl = text.rfind('\n');
        const size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
        if ((l_pos > 0 || line_starting) && all_space(text.substr(l_pos))) text.resize(l_pos);
      }
      push_text(text);
      line_ += count_newlines(pos_, open);
      pos_ = open + 2 + (sign ? 1 : 0);
      if (kind == '#') {
        line_starting = comment();
      } else {
        line_starting = tag(kind);
      }
    }
    Token end;
    end.type = Token::Type::End;
    end.line = line_;
    tokens_.push_back(end);
    return std::move(tokens_);
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw Error(source_ + ":" + std::to_string(line_) + ": chat template syntax error: " + what,
                "fix the template, or pass a corrected one with --chat-template FILE");
  }

  size_t find_open(size_t from) const {
    for (size_t i = src_.find('{', from); i != std::string::npos; i = src_.find('{', i + 1))
      if (i + 1 < src_.size() && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) return i;
    return std::string::npos;
  }

  int count_newlines(size_t a, size_t b) const {
    int n = 0;
    for (size_t i = a; i < b && i < src_.size(); ++i) n += src_[i] == '\n';
    return n;
  }

  void push_text(const std::string& text) {
    if (text.empty()) return;
    Token t;
    t.type = Token::Type::Text;
    t.text = text;
    t.line = line_;
    tokens_.push_back(std::move(t));
  }

  void push(Token::Type type, std::string text = {}) {
    Token t;
    t.type = type;
    t.text = std::move(text);
    t.line = line_;
    tokens_.push_back(std::move(t));
  }

  /// After an end marker: "-" strips all following whitespace; trim_blocks removes one newline.
  /// Returns whether what was consumed ends with a newline (jinja2's line_starting).
  bool after_end(bool strip, bool trim_newline) {
    bool newline = false;
    if (strip) {
      while (pos_ < src_.size()) {
        const size_t n = space_len(src_, pos_);
        if (n == 0) break;
        newline = src_[pos_] == '\n';
        line_ += src_[pos_] == '\n';
        pos_ += n;
      }
    } else if (trim_newline && pos_ < src_.size() && src_[pos_] == '\n') {
      ++pos_;
      ++line_;
      newline = true;
    }
    return newline;
  }

  bool comment() {
    const size_t body = pos_;
    const size_t end = src_.find("#}", pos_);
    if (end == std::string::npos) fail("unterminated {# comment");
    line_ += count_newlines(pos_, end);
    const char before = end > body ? src_[end - 1] : 0;
    pos_ = end + 2;
    return after_end(before == '-', before != '+');
  }

  /// Tokens of a {{ ... }} (kind '{') or {% ... %} (kind '%') tag, through its end marker.
  bool tag(char kind) {
    push(kind == '{' ? Token::Type::VarBegin : Token::Type::BlockBegin);
    std::string balance;
    bool prev_dot = false;
    while (true) {
      while (pos_ < src_.size()) {
        const size_t n = space_len(src_, pos_);
        if (n == 0) break;
        line_ += src_[pos_] == '\n';
        pos_ += n;
      }
      if (pos_ >= src_.size()) fail(kind == '{' ? "unclosed {{ (missing }})" : "unclosed {% (missing %})");
      if (balance.empty()) {
        const char* close = kind == '{' ? "}}" : "%}";
        if (src_.compare(pos_, 3, std::string("-") + close) == 0) {
          pos_ += 3;
          push(kind == '{' ? Token::Type::VarEnd : Token::Type::BlockEnd);
          return after_end(true, false);
        }
        if (kind == '%' && src_.compare(pos_, 3, "+%}") == 0) {
          pos_ += 3;
          push(Token::Type::BlockEnd);
          return false;
        }
        if (src_.compare(pos_, 2, close) == 0) {
          pos_ += 2;
          push(kind == '{' ? Token::Type::VarEnd : Token::Type::BlockEnd);
          return after_end(false, kind == '%');
        }
      }
      const char c = src_[pos_];
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        const size_t start = pos_;
        while (pos_ < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[pos_])) || src_[pos_] == '_')) ++pos_;
        push(Token::Type::Name, src_.substr(start, pos_ - start));
        prev_dot = false;
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        number(prev_dot);
        prev_dot = false;
      } else if (c == '\'' || c == '"') {
        string_literal(c);
        prev_dot = false;
      } else {
        static const char* const two[] = {"//", "**", "==", "!=", "<=", ">="};
        std::string op;
        for (const char* t : two)
          if (src_.compare(pos_, 2, t) == 0) op = t;
        if (op.empty()) {
          if (!std::strchr("+-*/%~<>=.,:|()[]{}", c) || c == 0) fail(std::string("unexpected character '") + c + "'");
          op = std::string(1, c);
        }
        if (op == "(" || op == "[" || op == "{") {
          if (balance.size() >= 256) fail("brackets nested too deeply");
          balance += op == "(" ? ')' : op == "[" ? ']' : '}';
        } else if (op == ")" || op == "]" || op == "}") {
          if (balance.empty() || balance.back() != op[0]) fail("unexpected '" + op + "'");
          balance.pop_back();
        }
        pos_ += op.size();
        push(Token::Type::Op, op);
        prev_dot = op == ".";
      }
    }
  }

  /// Digits with single underscores between them, starting at pos_.
  std::string digits() {
    std::string d;
    while (pos_ < src_.size() && std::isdigit(static_cast<unsigned char>(src_[pos_]))) {
      d += src_[pos_++];
      if (pos_ + 1 < src_.size() && src_[pos_] == '_' && std::isdigit(static_cast<unsigned char>(src_[pos_ + 1]))) ++pos_;
    }
    return d;
  }

  void number(bool after_dot) {
    std::string lit = digits();
    bool is_float = false;
    if (!after_dot) {
      const size_t save = pos_;
      if (pos_ + 1 < src_.size() && src_[pos_] == '.' && std::isdigit(static_cast<unsigned char>(src_[pos_ + 1]))) {
        ++pos_;
        lit += "." + digits();
        is_float = true;
      }
      if (pos_ < src_.size() && (src_[pos_] == 'e' || src_[pos_] == 'E')) {
        size_t p = pos_ + 1;
        std::string e = "e";
        if (p < src_.size() && (src_[p] == '+' || src_[p] == '-')) e += src_[p++];
        if (p < src_.size() && std::isdigit(static_cast<unsigned char>(src_[p]))) {
          pos_ = p;
          lit += e + digits();
          is_float = true;
        }
      }
      if (!is_float) pos_ = save + 0;
    }
    Token t;
    t.line = line_;
    t.text = lit;
    if (is_float) {
      t.type = Token::Type::Float;
      t.float_value = std::strtod(lit.c_str(), nullptr);
    } else {
      t.type = Token::Type::Int;
      int64_t v = 0;
      for (char d : lit) {
        if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, d - '0', &v))
          fail("integer literal " + lit + " is too large (64-bit integers only)");
      }
      t.int_value = v;
    }
    tokens_.push_back(std::move(t));
  }

  int hex(size_t at, size_t n) {
    int v = 0;
    for (size_t k = 0; k < n; ++k) {
      if (at + k >= src_.size() || !std::isxdigit(static_cast<unsigned char>(src_[at + k])))
        fail("truncated \\x, \\u or \\U escape in a string literal");
      const char c = src_[at + k];
      v = v * 16 + (std::isdigit(static_cast<unsigned char>(c)) ? c - '0' : (std::tolower(c) - 'a' + 10));
    }
    return v;
  }

  /// A quoted string with Python's escapes (\n \t \r \\ \' \" \a \b \f \v \ooo \xhh \uhhhh \Uhhhhhhhh;
  /// an unknown escape keeps its backslash).
  void string_literal(char quote) {
    const int start_line = line_;
    ++pos_;
    std::string out;
    while (true) {
      if (pos_ >= src_.size()) fail("unterminated string literal");
      const char c = src_[pos_];
      if (c == quote) {
        ++pos_;
        break;
      }
      if (c == '\n') ++line_;
      if (c != '\\') {
        out += c;
        ++pos_;
        continue;
      }
      if (pos_ + 1 >= src_.size()) fail("unterminated string literal");
      const char e = src_[pos_ + 1];
      pos_ += 2;
      switch (e) {
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case 'a': out += '\a'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'v': out += '\v'; break;
        case '\\': out += '\\'; break;
        case '\'': out += '\''; break;
        case '"': out += '"'; break;
        case '\n': ++line_; break;  // line continuation
        case 'x': text::append(out, static_cast<uint32_t>(hex(pos_, 2))); pos_ += 2; break;
        case 'u': text::append(out, static_cast<uint32_t>(hex(pos_, 4))); pos_ += 4; break;
        case 'U': {
          const uint32_t cp = (static_cast<uint32_t>(hex(pos_, 4)) << 16) | static_cast<uint32_t>(hex(pos_ + 4, 4));
          if (cp > 0x10FFFF) fail("\\U escape out of range");
          text::append(out, cp);
          pos_ += 8;
          break;
        }
        default:
          if (e >= '0' && e <= '7') {
            uint32_t v = static_cast<uint32_t>(e - '0');
            for (int k = 0; k < 2 && pos_ < src_.size() && src_[pos_] >= '0' && src_[pos_] <= '7'; ++k)
              v = v * 8 + static_cast<uint32_t>(src_[pos_++] - '0');
            text::append(out, v);
          } else {
            out += '\\';
            out += e;
          }
      }
    }
    Token t;
    t.type = Token::Type::String;
    t.text = std::move(out);
    t.line = start_line;
    tokens_.push_back(std::move(t));
  }

  std::string src_;
  const std::string& source_;
  size_t pos_ = 0;
  int line_ = 1;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> tokenize(const std::string& template_text, const std::string& source) {
  return Lexer(template_text, source).run();
}

}  // namespace tpshard::jinja
