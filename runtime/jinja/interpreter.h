// interpreter.h: parse a Jinja template once, render it with a context, within fixed resource limits.
// Owns: Template (the parsed program), Limits, scoping (a for-loop body and a macro call are scopes; if is
// not), the loop object, macros, break/continue, jinja2's Undefined rules (an unknown name renders as ""
// and is false; using it as an object, number or callable is an Error), and errors that name the template
// file and line. Does not own: filters, tests, methods and global functions (builtins.h).
#pragma once
#include <cstddef>
#include <memory>
#include <string>

#include "runtime/jinja/ast.h"
#include "runtime/jinja/value.h"

namespace tpshard::jinja {

/// What one render may use; a template that needs more gets an Error naming the limit.
struct Limits {
  size_t max_output_bytes = 16u << 20;   ///< rendered text, and any one string value made on the way
  size_t max_loop_iterations = 1000000;  ///< for-loop iterations over the whole render (and list/range sizes)
  /// Nesting of blocks and expressions (parse) and of macro calls; evaluation recursion as a whole (macros
  /// calling macros included) is bounded by 8 * max_depth frames.
  size_t max_depth = 128;
  size_t max_work_bytes = 256u << 20;    ///< bytes all string operations of one render may produce in total
};

/// A parsed template. Immutable; one can be rendered any number of times, from several threads.
struct Template {
  std::string source;  ///< the file it came from, named in every error
  Limits limits;
  Body body;
};

/// Parse template_text (source names it in errors). Throws Error naming source, line and construct for a
/// syntax error or an unsupported construct (hint: --chat-template FILE).
std::shared_ptr<const Template> compile(const std::string& template_text, const std::string& source,
                                        const Limits& limits = {});

/// Render with the given top-level variables (plus the globals range, namespace, dict, raise_exception,
/// strftime_now). Throws Error naming the template file and line when rendering fails, a limit is passed,
/// or the template calls raise_exception (the message is the template's own).
std::string render(const Template& tmpl, const Dict& variables);

/// The evaluator; builtins.cpp calls back into it (budgets, calling functions). Not for other users.
class Interpreter {
 public:
  Interpreter(const Template& tmpl, const Dict& variables);
  std::string run();

  /// Account for a string of n bytes about to be made: each string is at most max_output_bytes and all of
  /// them together at most max_work_bytes. Throws Error when over.
  void charge(size_t n);
  /// Account for n loop iterations or list elements. Throws Error when over max_loop_iterations.
  void count(size_t n);
  /// Call a function value (macro, method, global) with arguments.
  Value call(const Value& fn, const ValueList& args, const KwArgs& kwargs);
  const Limits& limits() const { return tmpl_.limits; }

 private:
  struct Scope;
  using ScopePtr = std::shared_ptr<Scope>;
  enum class Flow { Normal, Break, Continue };

  Flow exec(const Body& body, std::string& out, const ScopePtr& scope);
  Flow exec_for(const Node& n, std::string& out, const ScopePtr& scope);
  void assign(const Node& n, Value v, const ScopePtr& scope);
  Value eval(const Expr& e, const ScopePtr& scope);
  Value eval_binary(const std::string& op, const Value& a, const Value& b);
  Value lookup(const std::string& name, const ScopePtr& scope) const;
  Value make_macro(const Node& n, const ScopePtr& scope);
  void emit(std::string& out, const std::string& s);

  const Template& tmpl_;
  const Dict& variables_;
  Dict globals_;
  size_t work_ = 0;
  size_t iterations_ = 0;
  size_t call_depth_ = 0;
  size_t frames_ = 0;  ///< exec/eval frames now on the C++ stack
  int line_ = 1;

  /// Counts one exec/eval frame; throws Error past 8 * max_depth.
  struct Frame {
    Interpreter& in;
    explicit Frame(Interpreter& i);
    ~Frame() { --in.frames_; }
  };
};

}  // namespace tpshard::jinja
