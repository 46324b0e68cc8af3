// interpreter.cpp: statement execution and expression evaluation with jinja2's scoping and Undefined rules.
#include "runtime/jinja/interpreter.h"

#include <cmath>
#include <limits>

#include "format/error.h"
#include "runtime/jinja/builtins.h"
#include "runtime/jinja/lexer.h"
#include "runtime/jinja/parser.h"

namespace tpshard::jinja {

/// Variables of one scope: the template top level, one for-loop iteration, or one macro call.
struct Interpreter::Scope {
  Dict vars;
  ScopePtr parent;
};

namespace {

/// Raised through the interpreter by raise_exception(); already carries the final message.
struct TemplateRaise : Error {
  using Error::Error;
};

[[noreturn]] void undefined_error(const Value& v) {
  throw Error(v.undefined_hint().empty() ? "a value is undefined" : v.undefined_hint());
}

[[noreturn]] void overflow() { throw Error("integer overflow (templates get 64-bit integers)"); }
int64_t add(int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) overflow();
  return r;
}
int64_t sub(int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_sub_overflow(a, b, &r)) overflow();
  return r;
}
int64_t mul(int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) overflow();
  return r;
}

double py_fmod(double a, double b) {
  double m = std::fmod(a, b);
  if (m != 0 && ((m < 0) != (b < 0))) m += b;
  return m;
}

}  // namespace

std::shared_ptr<const Template> compile(const std::string& template_text, const std::string& source,
                                        const Limits& limits) {
  auto t = std::make_shared<Template>();
  t->source = source;
  t->limits = limits;
  t->body = parse(tokenize(template_text, source), source, limits.max_depth);
  return t;
}

std::string render(const Template& tmpl, const Dict& variables) { return Interpreter(tmpl, variables).run(); }

Interpreter::Interpreter(const Template& tmpl, const Dict& variables)
    : tmpl_(tmpl), variables_(variables), globals_(global_functions()) {
  globals_.set(Value::string("raise_exception"),
               Value::function("raise_exception", [this](Interpreter&, const ValueList& args, const KwArgs&) -> Value {
                 const std::string msg = args.empty() ? "" : to_str(args[0]);
                 throw TemplateRaise(tmpl_.source + ":" + std::to_string(line_) + ": the chat template refused the conversation: " + msg,
                                     "change the messages to what this model's template accepts (roles, order), or pass "
                                     "another template with --chat-template FILE");
               }));
}

std::string Interpreter::run() {
  std::string out;
  auto root = std::make_shared<Scope>();
  try {
    exec(tmpl_.body, out, root);
  } catch (const TemplateRaise&) {
    throw;
  } catch (const Error& e) {
    throw Error(tmpl_.source + ":" + std::to_string(line_) + ": chat template failed: " + e.what(),
                e.hint().empty() ? "the template does something tprun's Jinja subset does not do, or fails for this "
                                   "conversation in Python too; pass a corrected template with --chat-template FILE"
                                 : e.hint());
  }
  return out;
}

Interpreter::Frame::Frame(Interpreter& i) : in(i) {
  if (++in.frames_ > 8 * in.tmpl_.limits.max_depth) {
    --in.frames_;
    throw Error("evaluation nested deeper than " + std::to_string(8 * in.tmpl_.limits.max_depth) +
                " levels (macros calling macros)");
  }
}

void Interpreter::charge(size_t n) {
  if (n > tmpl_.limits.max_output_bytes)
    throw Error("a string of " + std::to_string(n) + " bytes is over the limit of " +
                    std::to_string(tmpl_.limits.max_output_bytes) + " bytes",
                "the template or the conversation is too large (runtime/jinja/interpreter.h Limits)");
  work_ += n;
  if (work_ > tmpl_.limits.max_work_bytes)
    throw Error("the template produced more than " + std::to_string(tmpl_.limits.max_work_bytes) +
                    " bytes of strings in one render",
                "the template or the conversation is too large (runtime/jinja/interpreter.h Limits)");
}

void Interpreter::count(size_t n) {
  iterations_ += n;
  if (n > tmpl_.limits.max_loop_iterations || iterations_ > tmpl_.limits.max_loop_iterations)
    throw Error("more than " + std::to_string(tmpl_.limits.max_loop_iterations) + " loop iterations or list items",
                "the template loops too much (runtime/jinja/interpreter.h Limits)");
}

void Interpreter::emit(std::string& out, const std::string& s) {
  if (out.size() + s.size() > tmpl_.limits.max_output_bytes)
    throw Error("the rendered text is over the limit of " + std::to_string(tmpl_.limits.max_output_bytes) + " bytes",
                "the conversation is too long for one prompt (runtime/jinja/interpreter.h Limits)");
  out += s;
}

Value Interpreter::lookup(const std::string& name, const ScopePtr& scope) const {
  const Value key = Value::string(name);
  for (const Scope* s = scope.get(); s; s = s->parent.get())
    if (const Value* v = s->vars.find(key)) return *v;
  if (const Value* v = variables_.find(key)) return *v;
  if (const Value* v = globals_.find(key)) return *v;
  return Value::undefined("'" + name + "' is undefined");
}

Value Interpreter::call(const Value& fn, const ValueList& args, const KwArgs& kwargs) {
  if (fn.is_undefined()) undefined_error(fn);
  if (!fn.is_function()) throw Error("'" + fn.type_name() + "' object is not callable");
  return fn.as_function().call(*this, args, kwargs);
}

Value Interpreter::make_macro(const Node& n, const ScopePtr& scope) {
  const Node* node = &n;
  // Weak: the scope holds the macro, so a strong reference would be a cycle that is never freed.
  const std::weak_ptr<Scope> weak_scope = scope;
  return Value::function(n.name, [node, weak_scope](Interpreter& in, const ValueList& args, const KwArgs& kwargs) -> Value {
    const ScopePtr scope = weak_scope.lock();
    if (!scope) throw Error("macro '" + node->name + "' is called after the block that defined it ended");
    if (args.size() > node->params.size())
      throw Error("macro '" + node->name + "' takes not more than " + std::to_string(node->params.size()) +
                  " argument(s)");
    if (++in.call_depth_ > in.tmpl_.limits.max_depth) {
      --in.call_depth_;
      throw Error("macro calls nested deeper than " + std::to_string(in.tmpl_.limits.max_depth) + " levels");
    }
    auto local = std::make_shared<Scope>();
    local->parent = scope;
    for (size_t i = 0; i < node->params.size(); ++i) {
      const std::string& p = node->params[i].first;
      Value v;
      bool given = false;
      if (i < args.size()) {
        v = args[i];
        given = true;
      }
      for (const auto& kw : kwargs)
        if (kw.first == p) {
          v = kw.second;
          given = true;
        }
      if (!given) v = node->params[i].second ? in.eval(*node->params[i].second, local) : Value::undefined("'" + p + "' is undefined");
      local->vars.set(Value::string(p), v);
    }
    for (const auto& kw : kwargs) {
      bool known = false;
      for (const auto& p : node->params) known = known || p.first == kw.first;
      if (!known) {
        --in.call_depth_;
        throw Error("macro '" + node->name + "' takes no keyword argument '" + kw.first + "'");
      }
    }
    std::string out;
    try {
      in.exec(node->body, out, local);
    } catch (...) {
      --in.call_depth_;
      throw;
    }
    --in.call_depth_;
    return Value::string(std::move(out));
  });
}

Interpreter::Flow Interpreter::exec(const Body& body, std::string& out, const ScopePtr& scope) {
  const Frame frame(*this);
  for (const NodePtr& np : body) {
    const Node& n = *np;
    line_ = n.line;
    switch (n.kind) {
      case Node::Kind::Text: emit(out, n.text); break;
      case Node::Kind::Output: {
        const Value v = eval(*n.expr, scope);
        line_ = n.line;
        const std::string s = to_str(v, tmpl_.limits.max_output_bytes);
        emit(out, s);
        break;
      }
      case Node::Kind::If: {
        bool done = false;
        for (size_t i = 0; i < n.conditions.size() && !done; ++i) {
          if (eval(*n.conditions[i], scope).truthy()) {
            done = true;
            const Flow f = exec(n.bodies[i], out, scope);
            if (f != Flow::Normal) return f;
          }
        }
        if (!done) {
          const Flow f = exec(n.else_body, out, scope);
          if (f != Flow::Normal) return f;
        }
        break;
      }
      case Node::Kind::For: {
        const Flow f = exec_for(n, out, scope);
        if (f != Flow::Normal) return f;
        break;
      }
      case Node::Kind::Set: {
        Value v = eval(*n.expr, scope);
        line_ = n.line;
        if (!n.attr.empty()) {
          const Value target = lookup(n.targets[0], scope);
          if (!target.is_namespace()) throw Error("cannot assign attribute on non-namespace object '" + n.targets[0] + "'");
          if (v.holds_namespace()) throw Error("a namespace attribute cannot hold a namespace (not supported)");
          target.namespace_attrs().set(Value::string(n.attr), std::move(v));
        } else {
          assign(n, std::move(v), scope);
        }
        break;
      }
      case Node::Kind::SetBlock: {
        std::string captured;
        const Flow f = exec(n.body, captured, scope);
        if (f != Flow::Normal) return f;
        scope->vars.set(Value::string(n.targets[0]), Value::string(std::move(captured)));
        break;
      }
      case Node::Kind::Macro: scope->vars.set(Value::string(n.name), make_macro(n, scope)); break;
      case Node::Kind::Break: return Flow::Break;
      case Node::Kind::Continue: return Flow::Continue;
      case Node::Kind::Scoped: {
        const Flow f = exec(n.body, out, scope);
        if (f != Flow::Normal) return f;
        break;
      }
    }
  }
  return Flow::Normal;
}

void Interpreter::assign(const Node& n, Value v, const ScopePtr& scope) {
  if (!n.unpack) {
    scope->vars.set(Value::string(n.targets[0]), std::move(v));
    return;
  }
  const ValueList items = iterate(v);
  if (v.is_undefined() || items.size() != n.targets.size())
    throw Error("cannot unpack " + std::to_string(items.size()) + " value(s) into " + std::to_string(n.targets.size()) +
                " name(s)");
  for (size_t i = 0; i < items.size(); ++i) scope->vars.set(Value::string(n.targets[i]), items[i]);
}

Interpreter::Flow Interpreter::exec_for(const Node& n, std::string& out, const ScopePtr& scope) {
  const Value seq = eval(*n.expr, scope);
  if (!seq.is_undefined() && !seq.is_list() && !seq.is_dict() && !seq.is_string())
    throw Error("'" + seq.type_name() + "' object is not iterable");
  ValueList items = iterate(seq);
  count(items.size());
  if (n.cond) {  // the loop filter: loop.length and loop.index count only the items that pass
    ValueList kept;
    for (Value& item : items) {
      auto probe = std::make_shared<Scope>();
      probe->parent = scope;
      assign(n, item, probe);
      if (eval(*n.cond, probe).truthy()) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }
  if (items.empty()) return exec(n.else_body, out, scope);  // the else block belongs to the enclosing loop
  const size_t len = items.size();
  for (size_t i = 0; i < len; ++i) {
    auto iter = std::make_shared<Scope>();
    iter->parent = scope;
    Dict loop;
    const auto set = [&](const char* k, Value v) { loop.items.emplace_back(Value::string(k), std::move(v)); };
    set("index", Value::integer(static_cast<int64_t>(i + 1)));
    set("index0", Value::integer(static_cast<int64_t>(i)));
    set("revindex", Value::integer(static_cast<int64_t>(len - i)));
    set("revindex0", Value::integer(static_cast<int64_t>(len - i - 1)));
    set("first", Value::boolean(i == 0));
    set("last", Value::boolean(i + 1 == len));
    set("length", Value::integer(static_cast<int64_t>(len)));
    set("depth", Value::integer(1));
    set("depth0", Value::integer(0));
    set("previtem", i > 0 ? items[i - 1] : Value::undefined("there is no previous item"));
    set("nextitem", i + 1 < len ? items[i + 1] : Value::undefined("there is no next item"));
    set("cycle", Value::function("cycle", [i](Interpreter&, const ValueList& args, const KwArgs&) -> Value {
          if (args.empty()) throw Error("no items for cycling given");
          return args[i % args.size()];
        }));
    iter->vars.set(Value::string("loop"), Value::namespace_object(std::move(loop)));
    assign(n, items[i], iter);
    const Flow f = exec(n.body, out, iter);
    if (f == Flow::Break) break;
  }
  return Flow::Normal;
}

Value Interpreter::eval_binary(const std::string& op, const Value& a, const Value& b) {
  if (op == "~") {
    std::string s = to_str(a, tmpl_.limits.max_output_bytes);
    const std::string t = to_str(b, tmpl_.limits.max_output_bytes);
    charge(s.size() + t.size());
    return Value::string(s + t);
  }
  if (a.is_undefined()) undefined_error(a);
  if (b.is_undefined()) undefined_error(b);
  const auto type_error = [&]() -> Value {
    throw Error("unsupported operand type(s) for " + op + ": '" + a.type_name() + "' and '" + b.type_name() + "'");
  };
  if (a.is_number() && b.is_number()) {
    const bool ints = !a.is_float() && !b.is_float();
    const int64_t x = a.as_int(), y = b.as_int();
    const double fx = a.as_float(), fy = b.as_float();
    if (op == "+") return ints ? Value::integer(add(x, y)) : Value::number(fx + fy);
    if (op == "-") return ints ? Value::integer(sub(x, y)) : Value::number(fx - fy);
    if (op == "*") return ints ? Value::integer(mul(x, y)) : Value::number(fx * fy);
    if (op == "/") {
      if (fy == 0) throw Error("division by zero");
      return Value::number(fx / fy);
    }
    if (op == "//" || op == "%") {
      if (ints ? y == 0 : fy == 0) throw Error(op == "//" ? "integer division or modulo by zero" : "modulo by zero");
      if (ints) {
        if (x == std::numeric_limits<int64_t>::min() && y == -1) overflow();
        int64_t q = x / y, m = x % y;
        if (m != 0 && ((m < 0) != (y < 0))) {
          --q;
          m += y;
        }
        return Value::integer(op == "//" ? q : m);
      }
      return op == "//" ? Value::number(std::floor(fx / fy)) : Value::number(py_fmod(fx, fy));
    }
    if (op == "**") {
      if (ints && y >= 0) {
        int64_t result = 1, base = x;
        for (int64_t e = y; e > 0; e >>= 1) {
          if (e & 1) result = mul(result, base);
          if (e > 1) base = mul(base, base);
        }
        return Value::integer(result);
      }
      if (fx == 0 && fy < 0) throw Error("0.0 cannot be raised to a negative power");
      return Value::number(std::pow(fx, fy));
    }
    return type_error();
  }
  if (op == "+" && a.is_string() && b.is_string()) {
    charge(a.as_string().size() + b.as_string().size());
    return Value::string(a.as_string() + b.as_string());
  }
  if (op == "+" && a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
    count(a.as_list().size() + b.as_list().size());
    ValueList l = a.as_list();
    l.insert(l.end(), b.as_list().begin(), b.as_list().end());
    return Value::list(std::move(l), a.is_tuple());
  }
  if (op == "*" && (a.is_string() || a.is_list() || b.is_string() || b.is_list())) {
    const Value& seq = a.is_string() || a.is_list() ? a : b;
    const Value& times = a.is_string() || a.is_list() ? b : a;
    if (!times.is_int() && !times.is_bool()) return type_error();
    const int64_t k = std::max<int64_t>(0, times.as_int());
    if (seq.is_string()) {
      const size_t n = seq.as_string().size();
      if (n && static_cast<uint64_t>(k) > tmpl_.limits.max_output_bytes / n + 1) charge(tmpl_.limits.max_output_bytes + 1);
      charge(n * static_cast<size_t>(k));
      std::string s;
      for (int64_t i = 0; i < k; ++i) s += seq.as_string();
      return Value::string(std::move(s));
    }
    const size_t n = seq.as_list().size();
    if (n && static_cast<uint64_t>(k) > tmpl_.limits.max_loop_iterations / n + 1) count(tmpl_.limits.max_loop_iterations + 1);
    count(n * static_cast<size_t>(k));
    ValueList l;
    for (int64_t i = 0; i < k; ++i) l.insert(l.end(), seq.as_list().begin(), seq.as_list().end());
    return Value::list(std::move(l), seq.is_tuple());
  }
  if (op == "%" && a.is_string()) throw Error("printf-style string formatting ('...' % x) is not supported");
  return type_error();
}

Value Interpreter::eval(const Expr& e, const ScopePtr& scope) {
  const Frame frame(*this);
  line_ = e.line;
  switch (e.kind) {
    case Expr::Kind::Literal: return e.literal;
    case Expr::Kind::Name: return lookup(e.name, scope);
    case Expr::Kind::List:
    case Expr::Kind::Tuple: {
      ValueList l;
      for (const ExprPtr& a : e.args) l.push_back(eval(*a, scope));
      count(l.size());
      return Value::list(std::move(l), e.kind == Expr::Kind::Tuple);
    }
    case Expr::Kind::Dict: {
      Dict d;
      for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
        Value k = eval(*e.args[i], scope);
        if (k.is_list() && !k.is_tuple()) throw Error("unhashable type: 'list'");
        if (k.is_dict() || k.is_undefined()) throw Error("unhashable type: '" + k.type_name() + "'");
        d.set(k, eval(*e.args[i + 1], scope));
      }
      count(d.items.size());
      return Value::dict(std::move(d));
    }
    case Expr::Kind::GetAttr: return get_attr(*this, eval(*e.args[0], scope), e.name);
    case Expr::Kind::GetItem: {
      const Value obj = eval(*e.args[0], scope);
      return get_item(*this, obj, eval(*e.args[1], scope));
    }
    case Expr::Kind::Slice: {
      const Value obj = eval(*e.args[0], scope);
      const auto part = [&](size_t i) { return e.args[i] ? eval(*e.args[i], scope) : Value::none(); };
      const Value start = part(1), stop = part(2), step = part(3);
      return slice(*this, obj, start, stop, step);
    }
    case Expr::Kind::Call:
    case Expr::Kind::Filter:
    case Expr::Kind::Test: {
      const Value first = eval(*e.args[0], scope);
      ValueList args;
      for (size_t i = 1; i < e.args.size(); ++i) args.push_back(eval(*e.args[i], scope));
      KwArgs kw;
      for (const auto& p : e.kwargs) kw.emplace_back(p.first, eval(*p.second, scope));
      line_ = e.line;
      if (e.kind == Expr::Kind::Call) return call(first, args, kw);
      if (e.kind == Expr::Kind::Filter) return apply_filter(*this, e.name, first, args, kw);
      return Value::boolean(apply_test(*this, e.name, first, args) != e.negated);
    }
    case Expr::Kind::Not: return Value::boolean(!eval(*e.args[0], scope).truthy());
    case Expr::Kind::Neg:
    case Expr::Kind::Pos: {
      const Value v = eval(*e.args[0], scope);
      if (v.is_undefined()) undefined_error(v);
      if (!v.is_number()) throw Error("bad operand type for unary " + std::string(e.kind == Expr::Kind::Neg ? "-" : "+") + ": '" + v.type_name() + "'");
      if (e.kind == Expr::Kind::Pos) return v.is_bool() ? Value::integer(v.as_int()) : v;
      if (v.is_float()) return Value::number(-v.as_float());
      return Value::integer(sub(0, v.as_int()));
    }
    case Expr::Kind::Binary: {
      const Value a = eval(*e.args[0], scope);
      const Value b = eval(*e.args[1], scope);
      line_ = e.line;
      return eval_binary(e.name, a, b);
    }
    case Expr::Kind::And: {
      Value a = eval(*e.args[0], scope);
      return a.truthy() ? eval(*e.args[1], scope) : a;
    }
    case Expr::Kind::Or: {
      Value a = eval(*e.args[0], scope);
      return a.truthy() ? a : eval(*e.args[1], scope);
    }
    case Expr::Kind::Compare: {
      Value left = eval(*e.args[0], scope);
      for (size_t i = 0; i < e.ops.size(); ++i) {
        Value right = eval(*e.args[i + 1], scope);
        const std::string& op = e.ops[i];
        bool r = false;
        if (op == "==") r = equals(left, right);
        else if (op == "!=") r = !equals(left, right);
        else if (op == "in") r = contains(right, left);
        else if (op == "not in") r = !contains(right, left);
        else {
          if (left.is_undefined()) undefined_error(left);
          if (right.is_undefined()) undefined_error(right);
          if (op == "<") r = less_than(left, right);
          else if (op == ">") r = less_than(right, left);
          else if (op == "<=") r = less_than(left, right) || equals(left, right);
          else r = less_than(right, left) || equals(left, right);
        }
        if (!r) return Value::boolean(false);
        left = std::move(right);
      }
      return Value::boolean(true);
    }
    case Expr::Kind::Cond: {
      if (eval(*e.args[0], scope).truthy()) return eval(*e.args[1], scope);
      return e.args[2] ? eval(*e.args[2], scope) : Value::undefined("the inline if has no else");
    }
  }
  return Value();
}

}  // namespace tpshard::jinja
