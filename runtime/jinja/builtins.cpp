// builtins.cpp: filters, tests, sandboxed attribute access with Python methods, and global functions.
#include "runtime/jinja/builtins.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <set>

#include "format/error.h"

namespace tpshard::jinja {
namespace {

using Cps = std::vector<uint32_t>;

[[noreturn]] void undefined_error(const Value& v) {
  throw Error(v.undefined_hint().empty() ? "a value is undefined" : v.undefined_hint());
}

/// Argument i, else keyword name, else fallback.
Value arg(const ValueList& args, const KwArgs& kw, size_t i, const char* name, Value fallback = Value::none()) {
  if (i < args.size()) return args[i];
  for (const auto& p : kw)
    if (p.first == name) return p.second;
  return fallback;
}

Value str_value(Interpreter& in, std::string s) {
  in.charge(s.size());
  return Value::string(std::move(s));
}

std::string require_str(const Value& v, const char* what) {
  if (v.is_undefined()) undefined_error(v);
  if (!v.is_string()) throw Error(std::string(what) + " must be str, not " + v.type_name());
  return v.as_string();
}

int64_t require_int(const Value& v, const char* what) {
  if (v.is_undefined()) undefined_error(v);
  if (!v.is_int() && !v.is_bool()) throw Error(std::string(what) + " must be an integer, not " + v.type_name());
  return v.as_int();
}

/// Python str.strip / lstrip / rstrip; chars none = whitespace.
std::string strip(const std::string& s, const Value& chars, bool left, bool right) {
  const Cps cps = text::decode(s);
  Cps set;
  const bool ws = chars.is_none() || chars.is_undefined();
  if (!ws) set = text::decode(require_str(chars, "strip argument"));
  const auto drop = [&](uint32_t c) { return ws ? text::is_space(c) : std::find(set.begin(), set.end(), c) != set.end(); };
  size_t a = 0, b = cps.size();
  if (left)
    while (a < b && drop(cps[a])) ++a;
  if (right)
    while (b > a && drop(cps[b - 1])) --b;
  return text::encode(Cps(cps.begin() + static_cast<std::ptrdiff_t>(a), cps.begin() + static_cast<std::ptrdiff_t>(b)));
}

std::string case_map(const std::string& s, bool upper) {
  Cps cps = text::decode(s);
  for (uint32_t& c : cps) c = upper ? text::to_upper(c) : text::to_lower(c);
  return text::encode(cps);
}

/// Python str.title(): a cased letter after a cased letter is lowered, any other is uppered.
std::string py_title(const std::string& s) {
  Cps cps = text::decode(s);
  bool prev_cased = false;
  for (uint32_t& c : cps) {
    const bool cased = text::is_cased(c);
    c = prev_cased ? text::to_lower(c) : text::to_upper(c);
    prev_cased = cased;
  }
  return text::encode(cps);
}

std::string py_capitalize(const std::string& s) {
  Cps cps = text::decode(s);
  for (size_t i = 0; i < cps.size(); ++i) cps[i] = i == 0 ? text::to_upper(cps[i]) : text::to_lower(cps[i]);
  return text::encode(cps);
}

/// jinja2's title filter: words start after '-', whitespace, '(', '{', '[' or '<'.
std::string jinja_title(const std::string& s) {
  Cps cps = text::decode(s);
  bool start = true;
  for (uint32_t& c : cps) {
    const bool sep = c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || text::is_space(c);
    if (sep) {
      start = true;
      continue;
    }
    c = start ? text::to_upper(c) : text::to_lower(c);
    start = false;
  }
  return text::encode(cps);
}

/// Python str.replace(old, new, count).
std::string replace(Interpreter& in, const std::string& s, const std::string& from, const std::string& to, int64_t count) {
  std::string out;
  int64_t done = 0;
  if (from.empty()) {  // inserts `to` around every code point
    const Cps cps = text::decode(s);
    for (size_t i = 0; i <= cps.size(); ++i) {
      if (count < 0 || done < count) {
        out += to;
        ++done;
      }
      if (i < cps.size()) text::append(out, cps[i]);
      in.charge(out.size());
    }
    return out;
  }
  size_t pos = 0;
  while (count < 0 || done < count) {
    const size_t hit = s.find(from, pos);
    if (hit == std::string::npos) break;
    out.append(s, pos, hit - pos);
    out += to;
    pos = hit + from.size();
    ++done;
    if (out.size() > in.limits().max_output_bytes) in.charge(out.size());
  }
  out.append(s, pos, std::string::npos);
  in.charge(out.size());
  return out;
}

Value split(Interpreter& in, const std::string& s, const Value& sep, int64_t maxsplit, bool from_right) {
  ValueList parts;
  if (sep.is_none() || sep.is_undefined()) {
    Cps cps = text::decode(s);
    std::vector<std::pair<size_t, size_t>> words;  // [a, b) in code points
    size_t i = 0;
    while (i < cps.size()) {
      while (i < cps.size() && text::is_space(cps[i])) ++i;
      if (i >= cps.size()) break;
      size_t j = i;
      while (j < cps.size() && !text::is_space(cps[j])) ++j;
      words.emplace_back(i, j);
      i = j;
    }
    if (maxsplit >= 0 && static_cast<int64_t>(words.size()) > maxsplit + 1) {
      // The unsplit remainder keeps its inner whitespace (and, like Python, loses only the outer).
      if (from_right) {
        const size_t keep = words.size() - static_cast<size_t>(maxsplit);
        words[keep - 1] = {words[0].first, words[keep - 1].second};
        words.erase(words.begin(), words.begin() + static_cast<std::ptrdiff_t>(keep - 1));
      } else {
        const size_t m = static_cast<size_t>(maxsplit);
        words[m] = {words[m].first, words.back().second};
        words.resize(m + 1);
      }
    }
    for (const auto& w : words)
      parts.push_back(Value::string(text::encode(Cps(cps.begin() + static_cast<std::ptrdiff_t>(w.first),
                                                     cps.begin() + static_cast<std::ptrdiff_t>(w.second)))));
  } else {
    const std::string d = require_str(sep, "separator");
    if (d.empty()) throw Error("empty separator");
    std::vector<std::string> pieces;
    size_t pos = 0;
    while (true) {
      const size_t hit = s.find(d, pos);
      if (hit == std::string::npos) break;
      pieces.push_back(s.substr(pos, hit - pos));
      pos = hit + d.size();
    }
    pieces.push_back(s.substr(pos));
    if (maxsplit >= 0 && static_cast<int64_t>(pieces.size()) > maxsplit + 1) {
      const size_t m = static_cast<size_t>(maxsplit);
      std::vector<std::string> merged;
      if (from_right) {
        const size_t head = pieces.size() - m;
        std::string first = pieces[0];
        for (size_t k = 1; k < head; ++k) first += d + pieces[k];
        merged.push_back(first);
        merged.insert(merged.end(), pieces.begin() + static_cast<std::ptrdiff_t>(head), pieces.end());
      } else {
        merged.assign(pieces.begin(), pieces.begin() + static_cast<std::ptrdiff_t>(m));
        std::string rest = pieces[m];
        for (size_t k = m + 1; k < pieces.size(); ++k) rest += d + pieces[k];
        merged.push_back(rest);
      }
      pieces = std::move(merged);
    }
    for (std::string& p : pieces) parts.push_back(Value::string(std::move(p)));
  }
  in.count(parts.size());
  return Value::list(std::move(parts));
}

bool starts_or_ends(const std::string& s, const Value& what, bool ends) {
  const auto one = [&](const std::string& p) {
    if (p.size() > s.size()) return false;
    return ends ? s.compare(s.size() - p.size(), p.size(), p) == 0 : s.compare(0, p.size(), p) == 0;
  };
  if (what.is_list() && what.is_tuple()) {
    for (const Value& v : what.as_list())
      if (one(require_str(v, "prefix"))) return true;
    return false;
  }
  return one(require_str(what, "prefix"));
}

/// Code point index of sub in s, or -1.
int64_t find(const std::string& s, const std::string& sub) {
  const size_t hit = s.find(sub);
  if (hit == std::string::npos) return -1;
  return static_cast<int64_t>(text::decode(s.substr(0, hit)).size());
}

Value unsafe(const std::string& type, const std::string& name) {
  return Value::function(name, [type, name](Interpreter&, const ValueList&, const KwArgs&) -> Value {
    throw Error("'" + type + "." + name + "' modifies a value, which the immutable sandbox does not allow");
  });
}

Value string_method(const std::string& s, const std::string& name) {
  static const std::set<std::string> kNames = {"strip", "lstrip", "rstrip", "split", "rsplit", "startswith",
                                               "endswith", "upper", "lower", "title", "capitalize", "replace",
                                               "find", "count", "join", "isspace", "isdigit", "isalpha", "islower",
                                               "isupper", "format"};
  if (!kNames.count(name)) return Value::undefined("'str object' has no attribute '" + name + "'");
  return Value::function("str." + name, [s, name](Interpreter& in, const ValueList& a, const KwArgs& kw) -> Value {
    if (name == "strip" || name == "lstrip" || name == "rstrip")
      return Value::string(strip(s, arg(a, kw, 0, "chars"), name != "rstrip", name != "lstrip"));
    if (name == "split" || name == "rsplit") {
      const Value ms = arg(a, kw, 1, "maxsplit", Value::integer(-1));
      return split(in, s, arg(a, kw, 0, "sep"), require_int(ms, "maxsplit"), name == "rsplit");
    }
    if (name == "startswith" || name == "endswith") return Value::boolean(starts_or_ends(s, arg(a, kw, 0, "prefix"), name == "endswith"));
    if (name == "upper" || name == "lower") return Value::string(case_map(s, name == "upper"));
    if (name == "title") return Value::string(py_title(s));
    if (name == "capitalize") return Value::string(py_capitalize(s));
    if (name == "replace") {
      const Value c = arg(a, kw, 2, "count", Value::integer(-1));
      return Value::string(replace(in, s, require_str(arg(a, kw, 0, "old"), "old"), require_str(arg(a, kw, 1, "new"), "new"),
                                   require_int(c, "count")));
    }
    if (name == "find") return Value::integer(find(s, require_str(arg(a, kw, 0, "sub"), "sub")));
    if (name == "count") {
      const std::string sub = require_str(arg(a, kw, 0, "sub"), "sub");
      if (sub.empty()) return Value::integer(static_cast<int64_t>(text::decode(s).size()) + 1);
      int64_t n = 0;
      for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size())) ++n;
      return Value::integer(n);
    }
    if (name == "join") {
      std::string out;
      bool first = true;
      for (const Value& v : iterate(arg(a, kw, 0, "iterable"))) {
        if (!first) out += s;
        out += require_str(v, "sequence item");
        first = false;
        in.charge(out.size());
      }
      return Value::string(std::move(out));
    }
    if (name == "format") throw Error("str.format() is not supported");
    const Cps cps = text::decode(s);
    if (cps.empty()) return Value::boolean(false);
    bool all = true, any_cased = false;
    for (uint32_t c : cps) {
      if (name == "isspace") all = all && text::is_space(c);
      else if (name == "isdigit") all = all && c >= '0' && c <= '9';
      else if (name == "isalpha") all = all && (text::is_cased(c) || c > 0x2E80);
      else if (text::is_cased(c)) {  // islower / isupper: every cased letter in that case, and at least one
        any_cased = true;
        all = all && (name == "islower" ? text::to_upper(c) != c : text::to_lower(c) != c);
      }
    }
    return Value::boolean(name == "islower" || name == "isupper" ? all && any_cased : all);
  });
}

Value dict_method(const Value& d, const std::string& name) {
  if (name == "items" || name == "keys" || name == "values") {
    return Value::function("dict." + name, [d, name](Interpreter& in, const ValueList&, const KwArgs&) -> Value {
      ValueList out;
      for (const auto& kv : d.as_dict().items) {
        if (name == "items") out.push_back(Value::list({kv.first, kv.second}, true));
        else out.push_back(name == "keys" ? kv.first : kv.second);
      }
      in.count(out.size());
      return Value::list(std::move(out));
    });
  }
  if (name == "get") {
    return Value::function("dict.get", [d](Interpreter&, const ValueList& a, const KwArgs& kw) -> Value {
      if (a.empty()) throw Error("get expected at least 1 argument, got 0");
      const Value* v = d.as_dict().find(a[0]);
      return v ? *v : arg(a, kw, 1, "default");
    });
  }
  if (name == "pop" || name == "update" || name == "setdefault" || name == "clear" || name == "popitem")
    return unsafe("dict", name);
  return Value();
}

Value list_method(const Value& l, const std::string& name) {
  if (name == "index" || name == "count") {
    return Value::function("list." + name, [l, name](Interpreter&, const ValueList& a, const KwArgs&) -> Value {
      if (a.empty()) throw Error(name + " expected 1 argument, got 0");
      int64_t n = 0;
      for (size_t i = 0; i < l.as_list().size(); ++i) {
        if (!equals(l.as_list()[i], a[0])) continue;
        if (name == "index") return Value::integer(static_cast<int64_t>(i));
        ++n;
      }
      if (name == "index") throw Error(to_repr(a[0]) + " is not in list");
      return Value::integer(n);
    });
  }
  if (name == "append" || name == "extend" || name == "insert" || name == "pop" || name == "remove" ||
      name == "reverse" || name == "sort" || name == "clear")
    return unsafe("list", name);
  return Value();
}

/// Python len().
int64_t length(const Value& v) {
  if (v.is_undefined()) return 0;
  if (v.is_string()) return static_cast<int64_t>(text::decode(v.as_string()).size());
  if (v.is_list()) return static_cast<int64_t>(v.as_list().size());
  if (v.is_dict()) return static_cast<int64_t>(v.as_dict().items.size());
  throw Error("object of type '" + v.type_name() + "' has no len()");
}

/// item's attribute path "a.b.0" the way jinja2's attribute= arguments read it (item lookup first).
Value attribute_path(Interpreter& in, Value item, const std::string& path) {
  size_t pos = 0;
  while (true) {
    const size_t dot = path.find('.', pos);
    const std::string part = path.substr(pos, dot == std::string::npos ? std::string::npos : dot - pos);
    Value key = Value::string(part);
    if (!part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; }) && part.size() < 18)
      key = Value::integer(std::stoll(part));
    item = get_item(in, item, key);
    if (dot == std::string::npos) return item;
    pos = dot + 1;
  }
}

Value to_int(const Value& v, const Value& fallback) {
  if (v.is_int() || v.is_bool()) return Value::integer(v.as_int());
  if (v.is_float()) {
    const double f = v.as_float();
    if (!std::isfinite(f) || std::fabs(f) >= 9.2e18) return fallback;
    return Value::integer(static_cast<int64_t>(f));
  }
  if (v.is_string()) {
    const std::string s = strip(v.as_string(), Value::none(), true, true);
    size_t i = 0;
    bool neg = false;
    if (i < s.size() && (s[i] == '+' || s[i] == '-')) neg = s[i++] == '-';
    if (i >= s.size()) return fallback;
    int64_t r = 0;
    for (; i < s.size(); ++i) {
      if (s[i] == '_' && i + 1 < s.size() && std::isdigit(static_cast<unsigned char>(s[i + 1]))) continue;
      if (!std::isdigit(static_cast<unsigned char>(s[i]))) {
        char* end = nullptr;  // jinja2 falls back to int(float(value))
        const double f = std::strtod(s.c_str(), &end);
        if (end && *end == 0) return to_int(Value::number(f), fallback);
        return fallback;
      }
      if (__builtin_mul_overflow(r, 10, &r) || __builtin_add_overflow(r, s[i] - '0', &r)) return fallback;
    }
    return Value::integer(neg ? -r : r);
  }
  return fallback;
}

Value sorted(Interpreter& in, const ValueList& items, bool reverse, bool case_sensitive, const Value& attribute) {
  std::vector<std::pair<Value, Value>> keyed;
  for (const Value& v : items) {
    Value k = attribute.is_string() ? attribute_path(in, v, attribute.as_string()) : v;
    if (!case_sensitive && k.is_string()) k = Value::string(case_map(k.as_string(), false));
    keyed.emplace_back(std::move(k), v);
  }
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& a, const auto& b) {
    return reverse ? less_than(b.first, a.first) : less_than(a.first, b.first);
  });
  ValueList out;
  for (auto& p : keyed) out.push_back(std::move(p.second));
  return Value::list(std::move(out));
}

std::string indent(const std::string& s, const std::string& pad, bool first, bool blank) {
  std::vector<std::string> lines;
  const std::string t = s + "\n";
  size_t pos = 0;
  while (pos < t.size()) {
    const size_t nl = t.find('\n', pos);
    lines.push_back(t.substr(pos, nl - pos));
    pos = nl + 1;
  }
  std::string rv;
  if (blank) {
    for (size_t i = 0; i < lines.size(); ++i) rv += (i ? "\n" + pad : "") + lines[i];
  } else {
    rv = lines[0];
    for (size_t i = 1; i < lines.size(); ++i) rv += "\n" + (lines[i].empty() ? "" : pad + lines[i]);
  }
  return first ? pad + rv : rv;
}

const std::set<std::string>& filter_names() {
  static const std::set<std::string> names = {
      "trim", "length", "count", "upper", "lower", "title", "capitalize", "replace", "default", "d", "join",
      "first", "last", "list", "items", "tojson", "string", "int", "float", "abs", "round", "reverse", "sort",
      "unique", "sum", "min", "max", "select", "reject", "selectattr", "rejectattr", "map", "indent", "safe"};
  return names;
}

const std::set<std::string>& test_names() {
  static const std::set<std::string> names = {
      "defined", "undefined", "none", "string", "number", "integer", "float", "boolean", "true", "false",
      "mapping", "sequence", "iterable", "callable", "even", "odd", "divisibleby", "eq", "equalto", "==", "ne",
      "!=", "lt", "<", "le", "<=", "gt", ">", "ge", ">=", "in", "lower", "upper", "sameas"};
  return names;
}

}  // namespace

bool has_filter(const std::string& name) { return filter_names().count(name) > 0; }
bool has_test(const std::string& name) { return test_names().count(name) > 0; }

ValueList iterate(const Value& v) {
  if (v.is_undefined()) return {};
  if (v.is_list()) return v.as_list();
  if (v.is_dict()) {
    ValueList keys;
    for (const auto& kv : v.as_dict().items) keys.push_back(kv.first);
    return keys;
  }
  if (v.is_string()) {
    ValueList chars;
    for (uint32_t cp : text::decode(v.as_string())) {
      std::string c;
      text::append(c, cp);
      chars.push_back(Value::string(std::move(c)));
    }
    return chars;
  }
  throw Error("'" + v.type_name() + "' object is not iterable");
}

bool contains(const Value& container, const Value& item) {
  if (container.is_undefined()) return false;
  if (container.is_string()) {
    if (item.is_undefined()) undefined_error(item);
    return container.as_string().find(require_str(item, "'in <string>' left operand")) != std::string::npos;
  }
  if (container.is_list()) {
    for (const Value& v : container.as_list())
      if (equals(v, item)) return true;
    return false;
  }
  if (container.is_dict()) return container.as_dict().find(item) != nullptr;
  throw Error("argument of type '" + container.type_name() + "' is not iterable");
}

Value get_attr(Interpreter&, const Value& obj, const std::string& name) {
  if (obj.is_undefined()) undefined_error(obj);
  if (!name.empty() && name[0] == '_')  // the sandbox's unsafe attribute: an undefined that fails when used
    return Value::undefined("access to attribute '" + name + "' of '" + obj.type_name() + "' object is unsafe.");
  if (obj.is_string()) return string_method(obj.as_string(), name);
  if (obj.is_dict()) {
    Value m = dict_method(obj, name);
    if (!m.is_undefined()) return m;
    if (const Value* v = obj.as_dict().find(Value::string(name))) return *v;
    return Value::undefined("'dict object' has no attribute '" + name + "'");
  }
  if (obj.is_list()) {
    Value m = list_method(obj, name);
    if (!m.is_undefined()) return m;
  }
  if (obj.is_namespace()) {
    if (const Value* v = obj.as_dict().find(Value::string(name))) return *v;
  }
  return Value::undefined("'" + obj.type_name() + " object' has no attribute '" + name + "'");
}

Value get_item(Interpreter& in, const Value& obj, const Value& key) {
  if (obj.is_undefined()) undefined_error(obj);
  if (obj.is_dict()) {
    if (const Value* v = obj.as_dict().find(key)) return *v;
    if (key.is_string()) return get_attr(in, obj, key.as_string());
    return Value::undefined("'dict object' has no attribute " + to_repr(key));
  }
  if ((obj.is_list() || obj.is_string()) && (key.is_int() || key.is_bool())) {
    int64_t i = key.as_int();
    if (obj.is_list()) {
      const int64_t n = static_cast<int64_t>(obj.as_list().size());
      if (i < 0) i += n;
      if (i < 0 || i >= n) return Value::undefined(obj.type_name() + " object has no element " + std::to_string(key.as_int()));
      return obj.as_list()[static_cast<size_t>(i)];
    }
    const Cps cps = text::decode(obj.as_string());
    const int64_t n = static_cast<int64_t>(cps.size());
    if (i < 0) i += n;
    if (i < 0 || i >= n) return Value::undefined("str object has no element " + std::to_string(key.as_int()));
    std::string c;
    text::append(c, cps[static_cast<size_t>(i)]);
    return Value::string(std::move(c));
  }
  if (key.is_string()) return get_attr(in, obj, key.as_string());
  return Value::undefined("'" + obj.type_name() + " object' has no attribute " + to_repr(key));
}

Value slice(Interpreter& in, const Value& obj, const Value& start_v, const Value& stop_v, const Value& step_v) {
  if (obj.is_undefined()) undefined_error(obj);
  if (!obj.is_list() && !obj.is_string()) return Value::undefined("'" + obj.type_name() + " object' cannot be sliced");
  const auto index = [](const Value& v, const char* what) -> int64_t {
    if (v.is_undefined()) undefined_error(v);
    if (!v.is_int() && !v.is_bool()) throw Error(std::string("slice ") + what + " must be an integer or None");
    return v.as_int();
  };
  const int64_t step = step_v.is_none() ? 1 : index(step_v, "step");
  if (step == 0) throw Error("slice step cannot be zero");
  if (step == std::numeric_limits<int64_t>::min()) throw Error("slice step too small");
  const Cps cps = obj.is_string() ? text::decode(obj.as_string()) : Cps();
  const int64_t n = static_cast<int64_t>(obj.is_string() ? cps.size() : obj.as_list().size());
  const auto adjust = [&](const Value& v, bool is_start) -> int64_t {
    if (v.is_none()) return step < 0 ? (is_start ? n - 1 : -1) : (is_start ? 0 : n);
    int64_t i = index(v, is_start ? "start" : "stop");
    if (i < 0) {
      i = i < -n ? -1 : i + n;
      if (i < 0) i = step < 0 ? -1 : 0;
    } else if (i >= n) {
      i = step < 0 ? n - 1 : n;
    }
    return i;
  };
  const int64_t start = adjust(start_v, true), stop = adjust(stop_v, false);
  std::vector<size_t> picks;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    picks.push_back(static_cast<size_t>(i));
    if (step > 0 ? i > n - step : i < step) break;  // next i would overflow past the ends
  }
  in.count(picks.size());
  if (obj.is_string()) {
    Cps out;
    for (size_t p : picks) out.push_back(cps[p]);
    return Value::string(text::encode(out));
  }
  ValueList out;
  for (size_t p : picks) out.push_back(obj.as_list()[p]);
  return Value::list(std::move(out), obj.is_tuple());
}

Value apply_filter(Interpreter& in, const std::string& name, const Value& v, const ValueList& a, const KwArgs& kw) {
  if (name == "safe") return v;
  if (name == "default" || name == "d") {
    const bool boolean = arg(a, kw, 1, "boolean", Value::boolean(false)).truthy();
    if (v.is_undefined() || (boolean && !v.truthy())) return arg(a, kw, 0, "default_value", Value::string(""));
    return v;
  }
  if (name == "length" || name == "count") return Value::integer(length(v));
  if (name == "tojson") {
    const Value ind = arg(a, kw, 0, "indent");
    if (arg(a, kw, 1, "ensure_ascii", Value::boolean(false)).truthy()) throw Error("tojson(ensure_ascii=True) is not supported");
    if (!arg(a, kw, 2, "separators").is_none()) throw Error("tojson(separators=...) is not supported");
    const int indent = ind.is_none() ? -1 : static_cast<int>(std::clamp<int64_t>(require_int(ind, "indent"), 0, 64));
    return str_value(in, to_json(v, indent, arg(a, kw, 3, "sort_keys", Value::boolean(false)).truthy(),
                                 in.limits().max_output_bytes));
  }
  if (name == "items") {
    if (v.is_undefined()) return Value::list({});
    if (!v.is_dict()) throw Error("Can only get item pairs from a mapping.");
    ValueList out;
    for (const auto& kv : v.as_dict().items) out.push_back(Value::list({kv.first, kv.second}, true));
    return Value::list(std::move(out));
  }
  if (name == "list") {
    ValueList items = iterate(v);
    in.count(items.size());
    return Value::list(std::move(items));
  }
  if (name == "first" || name == "last") {
    const ValueList items = iterate(v);
    if (items.empty()) return Value::undefined("No " + name + " item, sequence was empty.");
    return name == "first" ? items.front() : items.back();
  }
  if (name == "reverse") {
    if (v.is_string()) {
      Cps cps = text::decode(v.as_string());
      std::reverse(cps.begin(), cps.end());
      return Value::string(text::encode(cps));
    }
    ValueList items = iterate(v);
    std::reverse(items.begin(), items.end());
    return Value::list(std::move(items));
  }
  if (name == "join") {
    const std::string sep = to_str(arg(a, kw, 0, "d", Value::string("")));
    const Value attribute = arg(a, kw, 1, "attribute");
    std::string out;
    bool first = true;
    for (const Value& item : iterate(v)) {
      if (!first) out += sep;
      out += to_str(attribute.is_none() ? item : attribute_path(in, item, to_str(attribute)), in.limits().max_output_bytes);
      first = false;
      in.charge(out.size());
    }
    return Value::string(std::move(out));
  }
  if (name == "string") return str_value(in, to_str(v, in.limits().max_output_bytes));
  if (name == "int") return to_int(v, arg(a, kw, 0, "default", Value::integer(0)));
  if (name == "float") {
    if (v.is_number()) return Value::number(v.as_float());
    if (v.is_string()) {
      const std::string s = strip(v.as_string(), Value::none(), true, true);
      char* end = nullptr;
      const double f = std::strtod(s.c_str(), &end);
      if (!s.empty() && end && *end == 0) return Value::number(f);
    }
    return arg(a, kw, 0, "default", Value::number(0.0));
  }
  if (name == "abs") {
    if (v.is_float()) return Value::number(std::fabs(v.as_float()));
    const int64_t i = require_int(v, "abs argument");
    if (i == std::numeric_limits<int64_t>::min()) throw Error("integer overflow (templates get 64-bit integers)");
    return Value::integer(i < 0 ? -i : i);
  }
  if (name == "round") {
    if (!v.is_number()) throw Error("round needs a number");
    const int64_t prec = std::clamp<int64_t>(require_int(arg(a, kw, 0, "precision", Value::integer(0)), "precision"), -15, 15);
    const std::string method = to_str(arg(a, kw, 1, "method", Value::string("common")));
    const double f = v.as_float();
    if (method == "common" && prec >= 0 && std::isfinite(f)) {  // Python round(): correctly rounded, half to even
      char buf[512];
      std::snprintf(buf, sizeof buf, "%.*f", static_cast<int>(prec), f);
      return Value::number(std::strtod(buf, nullptr));
    }
    const double scale = std::pow(10.0, static_cast<double>(prec));
    const double x = f * scale;
    const double r = method == "ceil" ? std::ceil(x) : method == "floor" ? std::floor(x) : std::nearbyint(x);
    return Value::number(r / scale);
  }
  if (name == "sort")
    return sorted(in, iterate(v), arg(a, kw, 0, "reverse", Value::boolean(false)).truthy(),
                  arg(a, kw, 1, "case_sensitive", Value::boolean(false)).truthy(), arg(a, kw, 2, "attribute"));
  if (name == "unique") {
    ValueList out;
    for (const Value& item : iterate(v)) {
      in.count(out.size() + 1);  // each comparison counts: unique is quadratic
      bool seen = false;
      for (const Value& o : out) seen = seen || equals(o, item);
      if (!seen) out.push_back(item);
    }
    return Value::list(std::move(out));
  }
  if (name == "sum") {
    const Value attribute = arg(a, kw, 0, "attribute");
    Value total = arg(a, kw, 1, "start", Value::integer(0));
    for (const Value& item : iterate(v)) {
      const Value x = attribute.is_none() ? item : attribute_path(in, item, to_str(attribute));
      if (!x.is_number() || !total.is_number()) throw Error("sum needs numbers");
      if (x.is_float() || total.is_float()) {
        total = Value::number(total.as_float() + x.as_float());
      } else {
        int64_t r = 0;
        if (__builtin_add_overflow(total.as_int(), x.as_int(), &r)) throw Error("integer overflow (templates get 64-bit integers)");
        total = Value::integer(r);
      }
    }
    return total;
  }
  if (name == "min" || name == "max") {
    const ValueList items = iterate(v);
    if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
    Value best = items[0];
    for (const Value& item : items)
      if (name == "min" ? less_than(item, best) : less_than(best, item)) best = item;
    return best;
  }
  if (name == "select" || name == "reject" || name == "selectattr" || name == "rejectattr") {
    const bool by_attr = name == "selectattr" || name == "rejectattr";
    const bool keep_if = name == "select" || name == "selectattr";
    size_t at = 0;
    std::string attribute;
    if (by_attr) {
      if (a.empty()) throw Error(name + " needs an attribute name");
      attribute = to_str(a[at++]);
    }
    std::string test;
    if (at < a.size()) test = to_str(a[at++]);
    const ValueList test_args(a.begin() + static_cast<std::ptrdiff_t>(std::min(at, a.size())), a.end());
    if (!test.empty() && !has_test(test)) throw Error("no test named '" + test + "'");
    ValueList out;
    for (const Value& item : iterate(v)) {
      const Value x = by_attr ? attribute_path(in, item, attribute) : item;
      const bool pass = test.empty() ? x.truthy() : apply_test(in, test, x, test_args);
      if (pass == keep_if) out.push_back(item);
    }
    return Value::list(std::move(out));
  }
  if (name == "map") {
    ValueList out;
    const Value attribute = arg(ValueList{}, kw, 0, "attribute");
    if (!attribute.is_none()) {
      const Value fallback = arg(ValueList{}, kw, 0, "default", Value());
      for (const Value& item : iterate(v)) {
        Value x = attribute_path(in, item, to_str(attribute));
        out.push_back(x.is_undefined() && !fallback.is_undefined() ? fallback : x);
      }
    } else {
      if (a.empty()) throw Error("map needs a filter name or attribute=");
      const std::string f = to_str(a[0]);
      if (!has_filter(f) || f == "map") throw Error("no filter named '" + f + "'");
      const ValueList rest(a.begin() + 1, a.end());
      for (const Value& item : iterate(v)) out.push_back(apply_filter(in, f, item, rest, {}));
    }
    return Value::list(std::move(out));
  }
  // String filters: jinja2 applies them to str(value) (undefined -> "").
  const std::string s = to_str(v, in.limits().max_output_bytes);
  if (name == "trim") return Value::string(strip(s, arg(a, kw, 0, "chars"), true, true));
  if (name == "upper" || name == "lower") return Value::string(case_map(s, name == "upper"));
  if (name == "title") return Value::string(jinja_title(s));
  if (name == "capitalize") return Value::string(py_capitalize(s));
  if (name == "replace") {
    const Value c = arg(a, kw, 2, "count");
    return Value::string(replace(in, s, to_str(arg(a, kw, 0, "old")), to_str(arg(a, kw, 1, "new")),
                                 c.is_none() ? -1 : require_int(c, "count")));
  }
  if (name == "indent") {
    const Value w = arg(a, kw, 0, "width", Value::integer(4));
    const std::string pad = w.is_string() ? w.as_string() : std::string(static_cast<size_t>(std::clamp<int64_t>(require_int(w, "width"), 0, 256)), ' ');
    const std::string out = indent(s, pad, arg(a, kw, 1, "first", Value::boolean(false)).truthy(),
                                   arg(a, kw, 2, "blank", Value::boolean(false)).truthy());
    return str_value(in, out);
  }
  throw Error("no filter named '" + name + "'");
}

bool apply_test(Interpreter& in, const std::string& name, const Value& v, const ValueList& a) {
  (void)in;
  const auto other = [&]() -> const Value& {
    if (a.empty()) throw Error("the test '" + name + "' needs an argument");
    return a[0];
  };
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "string") return v.is_string();
  if (name == "number") return v.is_number();
  if (name == "integer") return v.is_int();
  if (name == "float") return v.is_float();
  if (name == "boolean") return v.is_bool();
  if (name == "true") return v.is_bool() && v.as_bool();
  if (name == "false") return v.is_bool() && !v.as_bool();
  if (name == "mapping") return v.is_dict();
  if (name == "sequence") return v.is_string() || v.is_list() || v.is_dict();
  if (name == "iterable") return v.is_string() || v.is_list() || v.is_dict() || v.is_undefined();
  if (name == "callable") return v.is_function();
  if (name == "even" || name == "odd") {
    const int64_t i = require_int(v, "value");
    return (i % 2 == 0) == (name == "even");
  }
  if (name == "divisibleby") {
    const int64_t d = require_int(other(), "divisor");
    if (d == 0) throw Error("integer division or modulo by zero");
    if (d == -1) return true;
    return require_int(v, "value") % d == 0;
  }
  if (name == "eq" || name == "equalto" || name == "==") return equals(v, other());
  if (name == "ne" || name == "!=") return !equals(v, other());
  if (name == "lt" || name == "<") return less_than(v, other());
  if (name == "le" || name == "<=") return less_than(v, other()) || equals(v, other());
  if (name == "gt" || name == ">") return less_than(other(), v);
  if (name == "ge" || name == ">=") return less_than(other(), v) || equals(v, other());
  if (name == "in") return contains(other(), v);
  if (name == "lower" || name == "upper") {
    const std::string s = to_str(v);
    return s == case_map(s, name == "upper") && s != case_map(s, name != "upper");
  }
  if (name == "sameas") {
    const Value& o = other();
    if (v.kind() != o.kind()) return false;
    return v.is_none() || v.is_undefined() || ((v.is_bool() || v.is_int()) && equals(v, o)) ||
           (v.is_namespace() && &v.as_dict() == &o.as_dict());
  }
  throw Error("no test named '" + name + "'");
}

Dict global_functions() {
  Dict g;
  g.set(Value::string("range"), Value::function("range", [](Interpreter& in, const ValueList& a, const KwArgs&) -> Value {
          if (a.empty() || a.size() > 3) throw Error("range expected 1 to 3 arguments");
          int64_t start = 0, stop = 0, step = 1;
          if (a.size() == 1) {
            stop = require_int(a[0], "range argument");
          } else {
            start = require_int(a[0], "range argument");
            stop = require_int(a[1], "range argument");
            if (a.size() == 3) step = require_int(a[2], "range argument");
          }
          if (step == 0) throw Error("range() arg 3 must not be zero");
          const long double span = step > 0 ? (static_cast<long double>(stop) - start) : (static_cast<long double>(start) - stop);
          const long double n = span <= 0 ? 0 : std::ceil(span / std::fabs(static_cast<long double>(step)));
          if (n > 100000) throw Error("Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
          in.count(static_cast<size_t>(n));
          ValueList out;
          for (int64_t k = 0; k < static_cast<int64_t>(n); ++k) out.push_back(Value::integer(start + k * step));
          return Value::list(std::move(out));
        }));
  g.set(Value::string("namespace"), Value::function("namespace", [](Interpreter&, const ValueList& a, const KwArgs& kw) -> Value {
          Dict attrs;
          for (const Value& v : a) {
            if (!v.is_dict()) throw Error("namespace() takes a dict and keyword arguments");
            for (const auto& kv : v.as_dict().items) attrs.set(kv.first, kv.second);
          }
          for (const auto& p : kw) attrs.set(Value::string(p.first), p.second);
          return Value::namespace_object(std::move(attrs));
        }));
  g.set(Value::string("dict"), Value::function("dict", [](Interpreter&, const ValueList& a, const KwArgs& kw) -> Value {
          Dict d;
          for (const Value& v : a) {
            if (!v.is_dict()) throw Error("dict() takes a dict and keyword arguments");
            for (const auto& kv : v.as_dict().items) d.set(kv.first, kv.second);
          }
          for (const auto& p : kw) d.set(Value::string(p.first), p.second);
          return Value::dict(std::move(d));
        }));
  g.set(Value::string("strftime_now"), Value::function("strftime_now", [](Interpreter& in, const ValueList& a, const KwArgs&) -> Value {
          const std::string fmt = a.empty() ? "" : require_str(a[0], "format");
          if (fmt.empty()) return Value::string("");
          const std::time_t now = std::time(nullptr);
          std::tm tm{};
          localtime_r(&now, &tm);
          std::string buf(std::min<size_t>(fmt.size() * 64 + 64, 65536), '\0');
          const size_t n = std::strftime(&buf[0], buf.size(), fmt.c_str(), &tm);
          buf.resize(n);
          in.charge(n);
          return Value::string(buf);
        }));
  return g;
}

}  // namespace tpshard::jinja
