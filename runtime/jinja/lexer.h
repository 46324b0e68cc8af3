// lexer.h: Jinja template source -> tokens, with jinja2's whitespace rules as transformers configures them.
// Owns: newline normalisation (\r\n and \r become \n; one trailing newline dropped), trim_blocks (the first
// newline after a block or comment tag is removed), lstrip_blocks (spaces and tabs before a block or comment
// tag at the start of a line are removed), the - and + whitespace-control markers, comments, and the
// expression tokens inside {{ }} and {% %}. Does not own: the grammar (parser.h).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace tpshard::jinja {

/// One lexical token. For Text, String and Name, text is the (unescaped) content; for Op, the operator.
struct Token {
  enum class Type { Text, VarBegin, VarEnd, BlockBegin, BlockEnd, Name, String, Int, Float, Op, End };
  Type type = Type::End;
  std::string text;
  int64_t int_value = 0;
  double float_value = 0;
  int line = 1;
};

/// Tokenize a template. source names the template in errors. Throws Error (naming source and line) for an
/// unterminated tag, comment or string, an invalid character or escape, or an integer literal too large.
std::vector<Token> tokenize(const std::string& template_text, const std::string& source);

}  // namespace tpshard::jinja
