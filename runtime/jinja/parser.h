// parser.h: tokens -> syntax tree, for the subset of Jinja2 that chat templates use.
// Owns: the grammar (jinja2's operator precedence: inline if < or < and < not < comparisons < + - < ~ <
// * / // % < ** < unary - + < filters, tests, calls, attribute and subscript access), the statements
// if/elif/else, for (with `if` filter and else), set (plain, tuple, namespace attribute, block), macro,
// break/continue and transformers' generation tag; the nesting limit. Anything else ({% include %},
// {% extends %}, {% call %}, {% raw %}, ...) is an Error naming the construct, the file and the fix.
#pragma once
#include <string>
#include <vector>

#include "runtime/jinja/ast.h"
#include "runtime/jinja/lexer.h"

namespace tpshard::jinja {

/// Parse a token stream. source names the template in errors; max_depth bounds block and expression
/// nesting (each level is one recursion of the parser and of the interpreter).
Body parse(const std::vector<Token>& tokens, const std::string& source, size_t max_depth);

}  // namespace tpshard::jinja
