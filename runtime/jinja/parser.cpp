// parser.cpp: recursive-descent parser following jinja2's grammar for the supported subset.
#include "runtime/jinja/parser.h"

#include <algorithm>

#include "format/error.h"
#include "runtime/jinja/builtins.h"

namespace tpshard::jinja {
namespace {

using T = Token::Type;

const char* const kFixHint =
    "rewrite the template without it and pass the file with --chat-template FILE (tprun chat / serve), "
    "or give plain prompts instead";

class Parser {
 public:
  Parser(const std::vector<Token>& tokens, const std::string& source, size_t max_depth)
      : toks_(tokens), source_(source), max_depth_(max_depth) {}

  Body run() {
    Body b = body({});
    if (cur().type != T::End) fail("unexpected '" + cur().text + "'");
    return b;
  }

 private:
  /// Counts one level of recursion for the scope of a parse function.
  struct Depth {
    Parser& p;
    explicit Depth(Parser& parser) : p(parser) {
      if (++p.depth_ > p.max_depth_)
        p.fail("nested deeper than " + std::to_string(p.max_depth_) + " levels");
    }
    ~Depth() { --p.depth_; }
  };

  const Token& cur() const { return toks_[std::min(pos_, toks_.size() - 1)]; }
  const Token& peek(size_t k = 1) const { return toks_[std::min(pos_ + k, toks_.size() - 1)]; }
  void next() {
    if (pos_ < toks_.size() - 1) ++pos_;
  }
  bool is_op(const char* op) const { return cur().type == T::Op && cur().text == op; }
  bool is_name(const char* n) const { return cur().type == T::Name && cur().text == n; }
  bool skip_op(const char* op) {
    if (!is_op(op)) return false;
    next();
    return true;
  }
  bool skip_name(const char* n) {
    if (!is_name(n)) return false;
    next();
    return true;
  }

  [[noreturn]] void fail(const std::string& what) const {
    throw Error(source_ + ":" + std::to_string(cur().line) + ": chat template syntax error: " + what,
                "fix the template, or pass a corrected one with --chat-template FILE");
  }
  [[noreturn]] void unsupported(const std::string& construct) const {
    throw Error(source_ + ":" + std::to_string(cur().line) + ": chat template uses " + construct +
                    ", which tprun's Jinja subset does not support",
                kFixHint);
  }

  std::string describe(const Token& t) const {
    switch (t.type) {
      case T::End: return "end of template";
      case T::VarEnd: return "'}}'";
      case T::BlockEnd: return "'%}'";
      case T::Text: return "text";
      case T::String: return "string literal";
      default: return "'" + t.text + "'";
    }
  }

  void expect_op(const char* op) {
    if (!skip_op(op)) fail(std::string("expected '") + op + "', found " + describe(cur()));
  }
  void expect(T type, const char* what) {
    if (cur().type != type) fail(std::string("expected ") + what + ", found " + describe(cur()));
    next();
  }
  std::string expect_name() {
    if (cur().type != T::Name) fail("expected a name, found " + describe(cur()));
    std::string n = cur().text;
    next();
    return n;
  }

  ExprPtr make(Expr::Kind kind, int line, std::vector<ExprPtr> args = {}) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = line;
    e->args = std::move(args);
    size_t h = 0;
    for (const ExprPtr& a : e->args)
      if (a) h = std::max(h, a->height);
    e->height = h + 1;
    if (e->height > max_depth_) fail("expression nested deeper than " + std::to_string(max_depth_) + " levels");
    return e;
  }
  void add_arg(Expr& e, ExprPtr a) {
    if (a) e.height = std::max(e.height, a->height + 1);
    if (e.height > max_depth_) fail("expression nested deeper than " + std::to_string(max_depth_) + " levels");
    e.args.push_back(std::move(a));
  }
  ExprPtr binary(const std::string& op, ExprPtr a, ExprPtr b, int line) {
    std::vector<ExprPtr> args;
    args.push_back(std::move(a));
    args.push_back(std::move(b));
    ExprPtr e = make(Expr::Kind::Binary, line, std::move(args));
    e->name = op;
    return e;
  }

  // ---- expressions ----

  ExprPtr expression(bool with_condexpr = true) {
    Depth d(*this);
    return with_condexpr ? condexpr() : or_expr();
  }

  ExprPtr condexpr() {
    ExprPtr e = or_expr();
    while (is_name("if")) {
      const int line = cur().line;
      next();
      ExprPtr cond = or_expr();
      ExprPtr other;
      if (skip_name("else")) {
        Depth d(*this);
        other = condexpr();
      }
      std::vector<ExprPtr> args;
      args.push_back(std::move(cond));
      args.push_back(std::move(e));
      args.push_back(std::move(other));
      e = make(Expr::Kind::Cond, line, std::move(args));
    }
    return e;
  }

  ExprPtr or_expr() {
    ExprPtr e = and_expr();
    while (is_name("or")) {
      const int line = cur().line;
      next();
      std::vector<ExprPtr> args;
      args.push_back(std::move(e));
      args.push_back(and_expr());
      e = make(Expr::Kind::Or, line, std::move(args));
    }
    return e;
  }

  ExprPtr and_expr() {
    ExprPtr e = not_expr();
    while (is_name("and")) {
      const int line = cur().line;
      next();
      std::vector<ExprPtr> args;
      args.push_back(std::move(e));
      args.push_back(not_expr());
      e = make(Expr::Kind::And, line, std::move(args));
    }
    return e;
  }

  ExprPtr not_expr() {
    if (is_name("not")) {
      Depth d(*this);
      const int line = cur().line;
      next();
      std::vector<ExprPtr> args;
      args.push_back(not_expr());
      return make(Expr::Kind::Not, line, std::move(args));
    }
    return compare();
  }

  ExprPtr compare() {
    const int line = cur().line;
    ExprPtr first = math1();
    ExprPtr e;
    while (true) {
      std::string op;
      if (cur().type == T::Op && (cur().text == "==" || cur().text == "!=" || cur().text == "<" || cur().text == ">" ||
                                  cur().text == "<=" || cur().text == ">=")) {
        op = cur().text;
        next();
      } else if (is_name("in")) {
        op = "in";
        next();
      } else if (is_name("not") && peek().type == T::Name && peek().text == "in") {
        op = "not in";
        next();
        next();
      } else {
        break;
      }
      if (!e) {
        e = make(Expr::Kind::Compare, line);
        add_arg(*e, std::move(first));
      }
      e->ops.push_back(op);
      add_arg(*e, math1());
    }
    return e ? std::move(e) : std::move(first);
  }

  ExprPtr math1() {
    ExprPtr e = concat();
    while (is_op("+") || is_op("-")) {
      const std::string op = cur().text;
      const int line = cur().line;
      next();
      e = binary(op, std::move(e), concat(), line);
    }
    return e;
  }

  ExprPtr concat() {
    ExprPtr e = math2();
    while (is_op("~")) {
      const int line = cur().line;
      next();
      e = binary("~", std::move(e), math2(), line);
    }
    return e;
  }

  ExprPtr math2() {
    ExprPtr e = pow_expr();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const std::string op = cur().text;
      const int line = cur().line;
      next();
      e = binary(op, std::move(e), pow_expr(), line);
    }
    return e;
  }

  ExprPtr pow_expr() {
    ExprPtr e = unary(true);
    while (is_op("**")) {
      const int line = cur().line;
      next();
      e = binary("**", std::move(e), unary(true), line);
    }
    return e;
  }

  ExprPtr unary(bool with_filter) {
    Depth d(*this);
    const int line = cur().line;
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      const bool neg = is_op("-");
      next();
      std::vector<ExprPtr> args;
      args.push_back(unary(false));
      e = make(neg ? Expr::Kind::Neg : Expr::Kind::Pos, line, std::move(args));
    } else {
      e = primary();
    }
    e = postfix(std::move(e));
    if (with_filter) e = filter_expr(std::move(e));
    return e;
  }

  ExprPtr literal(Value v, int line) {
    ExprPtr e = make(Expr::Kind::Literal, line);
    e->literal = std::move(v);
    return e;
  }

  ExprPtr primary() {
    const Token& t = cur();
    const int line = t.line;
    switch (t.type) {
      case T::Name: {
        const std::string n = t.text;
        next();
        if (n == "true" || n == "True") return literal(Value::boolean(true), line);
        if (n == "false" || n == "False") return literal(Value::boolean(false), line);
        if (n == "none" || n == "None") return literal(Value::none(), line);
        ExprPtr e = make(Expr::Kind::Name, line);
        e->name = n;
        return e;
      }
      case T::String: {
        std::string s;
        while (cur().type == T::String) {
          s += cur().text;
          next();
        }
        return literal(Value::string(std::move(s)), line);
      }
      case T::Int: {
        const int64_t v = t.int_value;
        next();
        return literal(Value::integer(v), line);
      }
      case T::Float: {
        const double v = t.float_value;
        next();
        return literal(Value::number(v), line);
      }
      case T::Op:
        if (t.text == "(") {
          next();
          ExprPtr e = tuple(true, true);
          expect_op(")");
          return e;
        }
        if (t.text == "[") {
          next();
          ExprPtr e = make(Expr::Kind::List, line);
          while (!is_op("]")) {
            if (!e->args.empty()) expect_op(",");
            if (is_op("]")) break;
            add_arg(*e, expression());
          }
          expect_op("]");
          return e;
        }
        if (t.text == "{") {
          next();
          ExprPtr e = make(Expr::Kind::Dict, line);
          while (!is_op("}")) {
            if (!e->args.empty()) expect_op(",");
            if (is_op("}")) break;
            add_arg(*e, expression());
            expect_op(":");
            add_arg(*e, expression());
          }
          expect_op("}");
          return e;
        }
        break;
      default: break;
    }
    fail("unexpected " + describe(t));
  }

  /// A comma-separated expression list; a tuple when it has a comma (or is `()`), else the one expression.
  ExprPtr tuple(bool with_condexpr, bool explicit_parens) {
    const int line = cur().line;
    std::vector<ExprPtr> items;
    bool is_tuple = false;
    while (true) {
      if (!items.empty()) expect_op(",");
      const Token& t = cur();
      if (t.type == T::VarEnd || t.type == T::BlockEnd || t.type == T::End || is_op(")") ||
          (!with_condexpr && is_name("if")))
        break;
      items.push_back(expression(with_condexpr));
      if (is_op(","))
        is_tuple = true;
      else
        break;
    }
    if (!is_tuple) {
      if (items.size() == 1) return std::move(items[0]);
      if (!explicit_parens) fail("expected an expression, found " + describe(cur()));
    }
    return make(Expr::Kind::Tuple, line, std::move(items));
  }

  ExprPtr postfix(ExprPtr e) {
    while (true) {
      const int line = cur().line;
      if (is_op(".")) {
        next();
        if (cur().type == T::Name) {
          std::vector<ExprPtr> args;
          args.push_back(std::move(e));
          e = make(Expr::Kind::GetAttr, line, std::move(args));
          e->name = cur().text;
          next();
        } else if (cur().type == T::Int) {
          std::vector<ExprPtr> args;
          args.push_back(std::move(e));
          args.push_back(literal(Value::integer(cur().int_value), line));
          e = make(Expr::Kind::GetItem, line, std::move(args));
          next();
        } else {
          fail("expected an attribute name after '.', found " + describe(cur()));
        }
      } else if (is_op("[")) {
        next();
        e = subscript(std::move(e), line);
        expect_op("]");
      } else if (is_op("(")) {
        e = call(std::move(e), line);
      } else {
        return e;
      }
    }
  }

  ExprPtr subscript(ExprPtr obj, int line) {
    Depth d(*this);
    ExprPtr start, stop, step;
    if (!is_op(":")) {
      start = expression();
      if (is_op(",")) unsupported("a tuple subscript x[a, b]");
      if (!is_op(":")) {
        std::vector<ExprPtr> args;
        args.push_back(std::move(obj));
        args.push_back(std::move(start));
        return make(Expr::Kind::GetItem, line, std::move(args));
      }
    }
    expect_op(":");
    if (!is_op("]") && !is_op(":")) stop = expression();
    if (skip_op(":"))
      if (!is_op("]")) step = expression();
    std::vector<ExprPtr> args;
    args.push_back(std::move(obj));
    args.push_back(std::move(start));
    args.push_back(std::move(stop));
    args.push_back(std::move(step));
    return make(Expr::Kind::Slice, line, std::move(args));
  }

  /// Call arguments "(a, b, k=v)" into e (args after e->args[0], kwargs).
  void call_args(Expr& e) {
    expect_op("(");
    bool first = true;
    while (!is_op(")")) {
      if (!first) expect_op(",");
      first = false;
      if (is_op(")")) break;
      if (is_op("*") || is_op("**")) unsupported("*args / **kwargs in a call");
      if (cur().type == T::Name && peek().type == T::Op && peek().text == "=") {
        std::string k = cur().text;
        next();
        next();
        ExprPtr v = expression();
        e.height = std::max(e.height, v->height + 1);
        e.kwargs.emplace_back(std::move(k), std::move(v));
      } else {
        if (!e.kwargs.empty()) fail("positional argument after keyword argument");
        add_arg(e, expression());
      }
    }
    expect_op(")");
  }

  ExprPtr call(ExprPtr callee, int line) {
    std::vector<ExprPtr> args;
    args.push_back(std::move(callee));
    ExprPtr e = make(Expr::Kind::Call, line, std::move(args));
    call_args(*e);
    return e;
  }

  std::string dotted_name() {
    std::string n = expect_name();
    while (is_op(".")) {
      next();
      n += "." + expect_name();
    }
    return n;
  }

  ExprPtr filter_expr(ExprPtr e) {
    while (true) {
      const int line = cur().line;
      if (is_op("|")) {
        next();
        std::vector<ExprPtr> args;
        args.push_back(std::move(e));
        e = make(Expr::Kind::Filter, line, std::move(args));
        e->name = dotted_name();
        if (!has_filter(e->name)) unsupported("the filter |" + e->name);
        if (is_op("(")) call_args(*e);
      } else if (is_name("is")) {
        next();
        const bool negated = skip_name("not");
        std::vector<ExprPtr> args;
        args.push_back(std::move(e));
        e = make(Expr::Kind::Test, line, std::move(args));
        e->negated = negated;
        e->name = dotted_name();
        if (!has_test(e->name)) unsupported("the test 'is " + e->name + "'");
        if (is_op("(")) {
          call_args(*e);
        } else {
          const Token& t = cur();
          const bool arg_follows = t.type == T::String || t.type == T::Int || t.type == T::Float ||
                                   (t.type == T::Name && t.text != "else" && t.text != "or" && t.text != "and") ||
                                   (t.type == T::Op && (t.text == "[" || t.text == "{"));
          if (arg_follows) {
            Depth d(*this);
            ExprPtr a = postfix(primary());
            add_arg(*e, std::move(a));
          }
        }
      } else if (is_op("(")) {
        e = call(std::move(e), line);
      } else {
        return e;
      }
    }
  }

  // ---- statements ----

  bool at_block_named(const std::vector<std::string>& names) const {
    if (cur().type != T::BlockBegin || peek().type != T::Name) return false;
    return std::find(names.begin(), names.end(), peek().text) != names.end();
  }

  /// Statements until a {% NAME %} with NAME in end_names (left unconsumed) or the end of the template.
  Body body(const std::vector<std::string>& end_names) {
    Depth d(*this);
    Body out;
    while (cur().type != T::End) {
      if (cur().type == T::Text) {
        auto n = std::make_unique<Node>();
        n->kind = Node::Kind::Text;
        n->line = cur().line;
        n->text = cur().text;
        next();
        out.push_back(std::move(n));
      } else if (cur().type == T::VarBegin) {
        auto n = std::make_unique<Node>();
        n->kind = Node::Kind::Output;
        n->line = cur().line;
        next();
        n->expr = tuple(true, false);
        expect(T::VarEnd, "'}}'");
        out.push_back(std::move(n));
      } else if (cur().type == T::BlockBegin) {
        if (at_block_named(end_names)) return out;
        out.push_back(statement());
      } else {
        fail("unexpected " + describe(cur()));
      }
    }
    if (!end_names.empty()) fail("missing {% " + end_names.back() + " %} before the end of the template");
    return out;
  }

  /// Consumes "{% name %}".
  void end_tag(const char* name) {
    expect(T::BlockBegin, "'{%'");
    if (!is_name(name)) fail(std::string("expected {% ") + name + " %}, found " + describe(cur()));
    next();
    expect(T::BlockEnd, "'%}'");
  }

  /// Assignment targets: a name, or names separated by commas (optionally in parentheses).
  void targets(Node& n) {
    const bool paren = skip_op("(");
    n.targets.push_back(expect_name());
    while (skip_op(",")) {
      n.unpack = true;
      if (cur().type != T::Name) break;
      n.targets.push_back(expect_name());
    }
    if (paren) {
      n.unpack = true;
      expect_op(")");
    }
  }

  NodePtr statement() {
    next();  // {%
    auto n = std::make_unique<Node>();
    n->line = cur().line;
    if (cur().type != T::Name) fail("expected a tag name after '{%', found " + describe(cur()));
    const std::string tag = cur().text;
    next();
    if (tag == "if") {
      n->kind = Node::Kind::If;
      n->conditions.push_back(tuple(false, false));
      expect(T::BlockEnd, "'%}'");
      n->bodies.push_back(body({"elif", "else", "endif"}));
      while (true) {
        next();  // {%
        const std::string t = cur().text;
        next();
        if (t == "elif") {
          n->conditions.push_back(tuple(false, false));
          expect(T::BlockEnd, "'%}'");
          n->bodies.push_back(body({"elif", "else", "endif"}));
        } else if (t == "else") {
          expect(T::BlockEnd, "'%}'");
          n->else_body = body({"endif"});
          end_tag("endif");
          break;
        } else {
          expect(T::BlockEnd, "'%}'");
          break;
        }
      }
    } else if (tag == "for") {
      n->kind = Node::Kind::For;
      targets(*n);
      if (!skip_name("in")) fail("expected 'in' in {% for %}, found " + describe(cur()));
      n->expr = tuple(false, false);
      if (skip_name("if")) n->cond = expression();
      if (is_name("recursive")) unsupported("{% for ... recursive %}");
      expect(T::BlockEnd, "'%}'");
      ++loop_depth_;
      n->body = body({"endfor", "else"});
      --loop_depth_;
      if (at_block_named({"else"})) {
        next();
        next();
        expect(T::BlockEnd, "'%}'");
        n->else_body = body({"endfor"});
      }
      end_tag("endfor");
    } else if (tag == "set") {
      if (cur().type == T::Name && peek().type == T::Op && peek().text == ".") {
        n->kind = Node::Kind::Set;
        n->targets.push_back(expect_name());
        next();
        n->attr = expect_name();
        expect_op("=");
        n->expr = tuple(true, false);
        expect(T::BlockEnd, "'%}'");
      } else {
        targets(*n);
        if (skip_op("=")) {
          n->kind = Node::Kind::Set;
          n->expr = tuple(true, false);
          expect(T::BlockEnd, "'%}'");
        } else {
          if (is_op("|")) unsupported("a filtered block {% set x | filter %}");
          if (n->unpack) fail("a block {% set %} takes one name");
          n->kind = Node::Kind::SetBlock;
          expect(T::BlockEnd, "'%}'");
          n->body = body({"endset"});
          end_tag("endset");
        }
      }
    } else if (tag == "macro") {
      n->kind = Node::Kind::Macro;
      n->name = expect_name();
      expect_op("(");
      while (!is_op(")")) {
        if (!n->params.empty()) expect_op(",");
        if (is_op(")")) break;
        std::string p = expect_name();
        ExprPtr def;
        if (skip_op("=")) def = expression();
        n->params.emplace_back(std::move(p), std::move(def));
      }
      expect_op(")");
      expect(T::BlockEnd, "'%}'");
      const int saved = loop_depth_;
      loop_depth_ = 0;
      n->body = body({"endmacro"});
      loop_depth_ = saved;
      end_tag("endmacro");
    } else if (tag == "break" || tag == "continue") {
      if (loop_depth_ == 0) fail("{% " + tag + " %} outside a {% for %} loop");
      n->kind = tag == "break" ? Node::Kind::Break : Node::Kind::Continue;
      expect(T::BlockEnd, "'%}'");
    } else if (tag == "generation") {
      n->kind = Node::Kind::Scoped;
      expect(T::BlockEnd, "'%}'");
      n->body = body({"endgeneration"});
      end_tag("endgeneration");
    } else if (tag == "include" || tag == "import" || tag == "from" || tag == "extends" || tag == "block" ||
               tag == "call" || tag == "filter" || tag == "raw" || tag == "with" || tag == "autoescape" ||
               tag == "do" || tag == "trans") {
      unsupported("{% " + tag + " %}");
    } else if (tag.rfind("end", 0) == 0 || tag == "elif" || tag == "else") {
      fail("unexpected {% " + tag + " %}");
    } else {
      fail("unknown tag {% " + tag + " %}");
    }
    return n;
  }

  const std::vector<Token>& toks_;
  const std::string& source_;
  size_t max_depth_;
  size_t pos_ = 0;
  size_t depth_ = 0;
  int loop_depth_ = 0;
};

}  // namespace

Body parse(const std::vector<Token>& tokens, const std::string& source, size_t max_depth) {
  return Parser(tokens, source, max_depth).run();
}

}  // namespace tpshard::jinja
