// ast.h: the syntax tree of a parsed template: expressions (Expr) and statements (Node).
// Owns: the node shapes only. Built by parser.h, walked by interpreter.h.
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "runtime/jinja/value.h"

namespace tpshard::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

/// An expression. Which fields are used depends on kind (listed per kind).
struct Expr {
  enum class Kind {
    Literal,   ///< literal
    Name,      ///< name
    List,      ///< args (elements)
    Tuple,     ///< args
    Dict,      ///< args: key, value, key, value, ...
    GetAttr,   ///< args[0].name
    GetItem,   ///< args[0][args[1]]
    Slice,     ///< args[0][args[1]:args[2]:args[3]] (null parts absent)
    Call,      ///< args[0](args[1..], kwargs)
    Filter,    ///< args[0] | name(args[1..], kwargs)
    Test,      ///< args[0] is [not] name(args[1..]); negated
    Not,       ///< not args[0]
    Neg,       ///< -args[0]
    Pos,       ///< +args[0]
    Binary,    ///< args[0] op args[1]: + - * / // % ** ~
    And,       ///< args[0] and args[1]
    Or,        ///< args[0] or args[1]
    Compare,   ///< args[0] ops[0] args[1] ops[1] args[2] ...: == != < > <= >= in "not in"
    Cond,      ///< args[1] if args[0] else args[2] (args[2] may be null: undefined)
  };
  Kind kind = Kind::Literal;
  int line = 1;
  size_t height = 1;  ///< 1 + the largest height of args (what evaluating it recurses)
  Value literal;
  std::string name;  ///< Name, GetAttr attribute, Filter/Test name, Binary operator
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;  ///< Compare operators
  bool negated = false;          ///< Test: `is not`
};

struct Node;
using NodePtr = std::unique_ptr<Node>;
using Body = std::vector<NodePtr>;

/// A statement. Which fields are used depends on kind.
struct Node {
  enum class Kind {
    Text,      ///< text
    Output,    ///< {{ expr }}
    If,        ///< conditions[i] -> bodies[i]; else_body
    For,       ///< for targets in expr [if cond]: body; else_body
    Set,       ///< set targets = expr; or set target_object.attr = expr (attr non-empty)
    SetBlock,  ///< set targets[0] %}body{% endset
    Macro,     ///< macro name(params with defaults): body
    Break,
    Continue,
    Scoped,    ///< body rendered in place ({% generation %}, transformers' assistant-mask tag)
  };
  Kind kind = Kind::Text;
  int line = 1;
  std::string text;
  ExprPtr expr;
  ExprPtr cond;
  std::vector<ExprPtr> conditions;
  std::vector<Body> bodies;
  Body body;
  Body else_body;
  std::vector<std::string> targets;  ///< For / Set variable names (several: tuple unpacking)
  bool unpack = false;               ///< For / Set: targets came from a tuple (a, b) even if only one
  std::string attr;                  ///< Set: `set targets[0].attr = ...` (namespace attribute)
  std::string name;                  ///< Macro name
  std::vector<std::pair<std::string, ExprPtr>> params;  ///< Macro parameters and defaults (null = none)
};

}  // namespace tpshard::jinja
