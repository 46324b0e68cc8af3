// value.h: the values a chat template computes with, and their Python meaning.
// Owns: Value (undefined, none, bool, int, float, str, list/tuple, dict, namespace, function), Python's
// truthiness, ==, <, str() and repr(), json.dumps (transformers' tojson), and the UTF-8 code point helpers
// the string methods need. Does not own: evaluation (interpreter.h), filters and methods (builtins.h).
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace tpshard::jinja {

class Value;
class Interpreter;
using ValueList = std::vector<Value>;
/// Keyword arguments of a call, in call order.
using KwArgs = std::vector<std::pair<std::string, Value>>;

/// A Python dict (insertion ordered); also the attribute table of a namespace() object.
struct Dict {
  std::vector<std::pair<Value, Value>> items;
  /// The value stored under key (Python ==), or nullptr.
  const Value* find(const Value& key) const;
  /// Insert or replace key.
  void set(const Value& key, Value value);
};

/// A callable: a global function, a bound method or a macro. Throws Error on bad arguments.
struct Function {
  std::string name;
  std::function<Value(Interpreter&, const ValueList&, const KwArgs&)> call;
};

/// One template value. Lists and dicts are shared and never mutated after construction (the sandbox is
/// immutable); namespace objects are the one mutable kind (`{% set ns.x = ... %}`).
class Value {
 public:
  enum class Kind { Undefined, None, Bool, Int, Float, String, List, Dict, Namespace, Function };

  Value() = default;  ///< undefined
  static Value undefined(std::string hint = {});
  static Value none();
  static Value boolean(bool b);
  static Value integer(int64_t i);
  static Value number(double f);
  static Value string(std::string s);
  static Value list(ValueList items, bool tuple = false);
  static Value dict(Dict d);
  static Value namespace_object(Dict attrs);
  static Value function(std::string name, std::function<Value(Interpreter&, const ValueList&, const KwArgs&)> fn);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::Undefined; }
  bool is_none() const { return kind_ == Kind::None; }
  bool is_bool() const { return kind_ == Kind::Bool; }
  bool is_int() const { return kind_ == Kind::Int; }
  bool is_float() const { return kind_ == Kind::Float; }
  bool is_number() const { return kind_ == Kind::Int || kind_ == Kind::Float || kind_ == Kind::Bool; }
  bool is_string() const { return kind_ == Kind::String; }
  bool is_list() const { return kind_ == Kind::List; }
  bool is_tuple() const { return kind_ == Kind::List && tuple_; }
  bool is_dict() const { return kind_ == Kind::Dict; }
  bool is_namespace() const { return kind_ == Kind::Namespace; }
  bool is_function() const { return kind_ == Kind::Function; }

  bool as_bool() const { return b_; }
  int64_t as_int() const { return kind_ == Kind::Bool ? (b_ ? 1 : 0) : i_; }  ///< Int or Bool
  double as_float() const { return kind_ == Kind::Float ? f_ : static_cast<double>(as_int()); }  ///< any number
  const std::string& as_string() const { return s_; }
  const ValueList& as_list() const { return *list_; }
  const Dict& as_dict() const { return *dict_; }  ///< Dict or Namespace
  Dict& namespace_attrs() const { return *dict_; }
  const Function& as_function() const { return *fn_; }
  /// For undefined values: what was looked up ("'x' is undefined", "'dict object' has no attribute 'y'").
  const std::string& undefined_hint() const { return s_; }

  /// Python truthiness (undefined and none are false).
  bool truthy() const;
  /// Python type name as jinja2 reports it ("str", "int", "dict", ...).
  std::string type_name() const;
  /// Elements in this value counting every nested one (aliased lists count each time they appear).
  size_t total_elements() const { return total_; }
  /// True when this is a namespace or a list/dict holding one (a namespace may not hold one: no cycles).
  bool holds_namespace() const { return has_ns_; }

  /// Bounds of any one list or dict value, so that walking it (==, repr, tojson, destruction) stays
  /// cheap and shallow: Value::list / Value::dict throw Error past them.
  static constexpr size_t kMaxNesting = 256;
  static constexpr size_t kMaxElements = 10000000;

 private:
  void measure_children();  ///< depth_, total_, has_ns_ from the items; throws Error past the bounds
  Kind kind_ = Kind::Undefined;
  bool b_ = false;
  bool tuple_ = false;
  bool has_ns_ = false;
  uint32_t depth_ = 0;
  size_t total_ = 1;
  int64_t i_ = 0;
  double f_ = 0;
  std::string s_;
  std::shared_ptr<const ValueList> list_;
  std::shared_ptr<Dict> dict_;
  std::shared_ptr<const Function> fn_;
};

/// The size bound of to_str / to_repr / to_json when the caller gives none.
constexpr size_t kDefaultMaxBytes = 64u << 20;

/// Python ==, with 1 == 1.0 == True, element-wise lists and order-free dicts; undefined equals undefined.
bool equals(const Value& a, const Value& b);
/// Python a < b for numbers, strings (code point order) and lists; throws Error for other pairs.
bool less_than(const Value& a, const Value& b);
/// Python str(v); undefined renders as "". Throws Error when the result would pass max_bytes.
std::string to_str(const Value& v, size_t max_bytes = kDefaultMaxBytes);
/// Python repr(v). Throws Error when the result would pass max_bytes.
std::string to_repr(const Value& v, size_t max_bytes = kDefaultMaxBytes);
/// Python repr of a float: the shortest string that reads back as f ("1.0", "0.1", "1e+16", "inf").
std::string float_repr(double f);
/// json.dumps(v, ensure_ascii=False, indent=indent, sort_keys=sort_keys) with Python's default separators;
/// indent < 0 means None. Throws Error for undefined, functions and namespaces (not JSON serializable), and
/// when the result would pass max_bytes.
std::string to_json(const Value& v, int indent, bool sort_keys, size_t max_bytes = kDefaultMaxBytes);

namespace text {
/// The code points of UTF-8 text; an invalid byte decodes as itself (Latin-1) so that nothing is lost.
std::vector<uint32_t> decode(const std::string& s);
/// UTF-8 encoding of code points.
std::string encode(const std::vector<uint32_t>& cps);
void append(std::string& out, uint32_t cp);
/// Python str.isspace() for one code point.
bool is_space(uint32_t cp);
/// Simple upper/lower case mapping: ASCII, Latin-1, Greek and Cyrillic letters; other code points unchanged.
uint32_t to_upper(uint32_t cp);
uint32_t to_lower(uint32_t cp);
/// True for a letter with a case (what Python's title() and capitalize() look at).
bool is_cased(uint32_t cp);
}  // namespace text

}  // namespace tpshard::jinja
