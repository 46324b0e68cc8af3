// value.cpp: Python semantics of template values (equality, ordering, str, repr, json.dumps).
#include "runtime/jinja/value.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "format/error.h"
#include "tokenizer/utf8.h"

namespace tpshard::jinja {

const Value* Dict::find(const Value& key) const {
  for (const auto& kv : items)
    if (equals(kv.first, key)) return &kv.second;
  return nullptr;
}

void Dict::set(const Value& key, Value value) {
  for (auto& kv : items)
    if (equals(kv.first, key)) {
      kv.second = std::move(value);
      return;
    }
  items.emplace_back(key, std::move(value));
}

Value Value::undefined(std::string hint) {
  Value v;
  v.s_ = std::move(hint);
  return v;
}
Value Value::none() {
  Value v;
  v.kind_ = Kind::None;
  return v;
}
Value Value::boolean(bool b) {
  Value v;
  v.kind_ = Kind::Bool;
  v.b_ = b;
  return v;
}
Value Value::integer(int64_t i) {
  Value v;
  v.kind_ = Kind::Int;
  v.i_ = i;
  return v;
}
Value Value::number(double f) {
  Value v;
  v.kind_ = Kind::Float;
  v.f_ = f;
  return v;
}
Value Value::string(std::string s) {
  Value v;
  v.kind_ = Kind::String;
  v.s_ = std::move(s);
  return v;
}
void Value::measure_children() {
  size_t depth = 0, total = 1;
  bool ns = kind_ == Kind::Namespace;
  const auto add = [&](const Value& c) {
    depth = std::max<size_t>(depth, c.depth_);
    total = total + c.total_ < total ? SIZE_MAX : total + c.total_;
    ns = ns || c.has_ns_;
  };
  if (list_)
    for (const Value& c : *list_) add(c);
  if (dict_)
    for (const auto& kv : dict_->items) {
      add(kv.first);
      add(kv.second);
    }
  if (depth + 1 > kMaxNesting) throw Error("values nested deeper than " + std::to_string(kMaxNesting) + " levels");
  if (total > kMaxElements)
    throw Error("a value of more than " + std::to_string(kMaxElements) + " elements (nested ones counted)");
  depth_ = static_cast<uint32_t>(depth + 1);
  total_ = total;
  has_ns_ = ns;
}

Value Value::list(ValueList items, bool tuple) {
  Value v;
  v.kind_ = Kind::List;
  v.tuple_ = tuple;
  v.list_ = std::make_shared<const ValueList>(std::move(items));
  v.measure_children();
  return v;
}
Value Value::dict(Dict d) {
  Value v;
  v.kind_ = Kind::Dict;
  v.dict_ = std::make_shared<Dict>(std::move(d));
  v.measure_children();
  return v;
}
Value Value::namespace_object(Dict attrs) {
  Value v;
  v.kind_ = Kind::Namespace;
  v.dict_ = std::make_shared<Dict>(std::move(attrs));
  v.measure_children();
  return v;
}
Value Value::function(std::string name, std::function<Value(Interpreter&, const ValueList&, const KwArgs&)> fn) {
  Value v;
  v.kind_ = Kind::Function;
  v.fn_ = std::make_shared<const Function>(Function{std::move(name), std::move(fn)});
  return v;
}

bool Value::truthy() const {
  switch (kind_) {
    case Kind::Undefined:
    case Kind::None: return false;
    case Kind::Bool: return b_;
    case Kind::Int: return i_ != 0;
    case Kind::Float: return f_ != 0;
    case Kind::String: return !s_.empty();
    case Kind::List: return !list_->empty();
    case Kind::Dict: return !dict_->items.empty();
    default: return true;
  }
}

std::string Value::type_name() const {
  switch (kind_) {
    case Kind::Undefined: return "Undefined";
    case Kind::None: return "NoneType";
    case Kind::Bool: return "bool";
    case Kind::Int: return "int";
    case Kind::Float: return "float";
    case Kind::String: return "str";
    case Kind::List: return tuple_ ? "tuple" : "list";
    case Kind::Dict: return "dict";
    case Kind::Namespace: return "Namespace";
    default: return "function";
  }
}

bool equals(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_float() == b.as_float();
    return a.as_int() == b.as_int();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::Undefined:
    case Value::Kind::None: return true;
    case Value::Kind::String: return a.as_string() == b.as_string();
    case Value::Kind::List: {
      if (a.is_tuple() != b.is_tuple() || a.as_list().size() != b.as_list().size()) return false;
      for (size_t i = 0; i < a.as_list().size(); ++i)
        if (!equals(a.as_list()[i], b.as_list()[i])) return false;
      return true;
    }
    case Value::Kind::Dict: {
      if (a.as_dict().items.size() != b.as_dict().items.size()) return false;
      for (const auto& kv : a.as_dict().items) {
        const Value* other = b.as_dict().find(kv.first);
        if (!other || !equals(kv.second, *other)) return false;
      }
      return true;
    }
    case Value::Kind::Namespace: return &a.as_dict() == &b.as_dict();
    case Value::Kind::Function: return &a.as_function() == &b.as_function();
    default: return false;
  }
}

bool less_than(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_float() < b.as_float();
    return a.as_int() < b.as_int();
  }
  if (a.is_string() && b.is_string()) return a.as_string() < b.as_string();  // UTF-8 byte order = code point order
  if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
    const ValueList& x = a.as_list();
    const ValueList& y = b.as_list();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (equals(x[i], y[i])) continue;
      return less_than(x[i], y[i]);
    }
    return x.size() < y.size();
  }
  throw Error("'<' not supported between instances of '" + a.type_name() + "' and '" + b.type_name() + "'");
}

std::string float_repr(double f) {
  if (std::isnan(f)) return "nan";
  if (std::isinf(f)) return f > 0 ? "inf" : "-inf";
  if (f == 0) return std::signbit(f) ? "-0.0" : "0.0";
  char buf[64];
  int prec = 0;
  for (; prec < 17; ++prec) {
    std::snprintf(buf, sizeof buf, "%.*e", prec, f);
    if (std::strtod(buf, nullptr) == f) break;
  }
  // buf = [-]D[.DDD]e[+-]XX
  std::string s(buf);
  const bool neg = s[0] == '-';
  if (neg) s.erase(0, 1);
  const size_t e = s.find('e');
  std::string digits = s.substr(0, 1) + (e > 1 ? s.substr(2, e - 2) : "");
  const int exp = std::atoi(s.c_str() + e + 1);
  std::string out;
  if (exp >= -4 && exp < 16) {
    if (exp < 0) {
      out = "0." + std::string(static_cast<size_t>(-exp - 1), '0') + digits;
    } else if (static_cast<size_t>(exp) + 1 >= digits.size()) {
      out = digits + std::string(static_cast<size_t>(exp) + 1 - digits.size(), '0') + ".0";
    } else {
      out = digits.substr(0, static_cast<size_t>(exp) + 1) + "." + digits.substr(static_cast<size_t>(exp) + 1);
    }
  } else {
    out = digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char eb[16];
    std::snprintf(eb, sizeof eb, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    out += eb;
  }
  return neg ? "-" + out : out;
}

namespace {

/// Python's str.isprintable() is false for these (Cc, Zs other than space, Zl, Zp, common Cf): repr escapes them.
bool repr_escapes(uint32_t cp) {
  return cp < 0x20 || (cp >= 0x7F && cp <= 0xA0) || cp == 0xAD || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200F) ||
         (cp >= 0x2028 && cp <= 0x202F) || (cp >= 0x205F && cp <= 0x2064) || cp == 0x3000 || cp == 0xFEFF;
}

std::string string_repr(const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos;
  const bool has_double = s.find('"') != std::string::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (uint32_t cp : text::decode(s)) {
    if (cp == '\\') out += "\\\\";
    else if (cp == static_cast<uint32_t>(quote)) out += std::string("\\") + quote;
    else if (cp == '\n') out += "\\n";
    else if (cp == '\r') out += "\\r";
    else if (cp == '\t') out += "\\t";
    else if (repr_escapes(cp)) {
      char b[16];
      if (cp <= 0xFF) std::snprintf(b, sizeof b, "\\x%02x", cp);
      else std::snprintf(b, sizeof b, "\\u%04x", cp);
      out += b;
    } else {
      text::append(out, cp);
    }
  }
  return out + quote;
}

void json_string(std::string& out, const std::string& s) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          char b[8];
          std::snprintf(b, sizeof b, "\\u%04x", c);
          out += b;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
}

std::string json_key(const Value& k) {
  if (k.is_string()) return k.as_string();
  if (k.is_bool()) return k.as_bool() ? "true" : "false";
  if (k.is_int()) return std::to_string(k.as_int());
  if (k.is_float()) return float_repr(k.as_float());
  if (k.is_none()) return "null";
  throw Error("keys must be str, int, float, bool or None, not " + k.type_name());
}

void check_size(const std::string& out, size_t max_bytes) {
  if (out.size() > max_bytes)
    throw Error("a string of more than " + std::to_string(max_bytes) + " bytes (the size limit)");
}

void json_value(std::string& out, const Value& v, int indent, bool sort_keys, int level, size_t max_bytes) {
  check_size(out, max_bytes);
  const auto newline = [&](int lvl) {
    out += '\n';
    out.append(static_cast<size_t>(indent) * static_cast<size_t>(lvl), ' ');
  };
  switch (v.kind()) {
    case Value::Kind::None: out += "null"; return;
    case Value::Kind::Bool: out += v.as_bool() ? "true" : "false"; return;
    case Value::Kind::Int: out += std::to_string(v.as_int()); return;
    case Value::Kind::Float: {
      const double f = v.as_float();
      out += std::isnan(f) ? "NaN" : std::isinf(f) ? (f > 0 ? "Infinity" : "-Infinity") : float_repr(f);
      return;
    }
    case Value::Kind::String: json_string(out, v.as_string()); return;
    case Value::Kind::List: {
      const ValueList& l = v.as_list();
      if (l.empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t i = 0; i < l.size(); ++i) {
        if (i) out += indent >= 0 ? "," : ", ";
        if (indent >= 0) newline(level + 1);
        json_value(out, l[i], indent, sort_keys, level + 1, max_bytes);
      }
      if (indent >= 0) newline(level);
      out += ']';
      return;
    }
    case Value::Kind::Dict: {
      std::vector<std::pair<std::string, const Value*>> kv;
      for (const auto& p : v.as_dict().items) kv.emplace_back(json_key(p.first), &p.second);
      if (sort_keys)
        std::stable_sort(kv.begin(), kv.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
      if (kv.empty()) {
        out += "{}";
        return;
      }
      out += '{';
      for (size_t i = 0; i < kv.size(); ++i) {
        if (i) out += indent >= 0 ? "," : ", ";
        if (indent >= 0) newline(level + 1);
        json_string(out, kv[i].first);
        out += ": ";
        json_value(out, *kv[i].second, indent, sort_keys, level + 1, max_bytes);
      }
      if (indent >= 0) newline(level);
      out += '}';
      return;
    }
    default: throw Error("Object of type " + v.type_name() + " is not JSON serializable");
  }
}

void repr_into(std::string& out, const Value& v, size_t max_bytes) {
  check_size(out, max_bytes);
  switch (v.kind()) {
    case Value::Kind::Undefined: return;
    case Value::Kind::None: out += "None"; return;
    case Value::Kind::Bool: out += v.as_bool() ? "True" : "False"; return;
    case Value::Kind::Int: out += std::to_string(v.as_int()); return;
    case Value::Kind::Float: out += float_repr(v.as_float()); return;
    case Value::Kind::String: out += string_repr(v.as_string()); return;
    case Value::Kind::List: {
      out += v.is_tuple() ? "(" : "[";
      const ValueList& l = v.as_list();
      for (size_t i = 0; i < l.size(); ++i) {
        if (i) out += ", ";
        repr_into(out, l[i], max_bytes);
      }
      if (v.is_tuple() && l.size() == 1) out += ",";
      out += v.is_tuple() ? ")" : "]";
      return;
    }
    case Value::Kind::Dict:
    case Value::Kind::Namespace: {
      out += v.is_namespace() ? "<Namespace {" : "{";
      bool first = true;
      for (const auto& kv : v.as_dict().items) {
        if (!first) out += ", ";
        repr_into(out, kv.first, max_bytes);
        out += ": ";
        repr_into(out, kv.second, max_bytes);
        first = false;
      }
      out += v.is_namespace() ? "}>" : "}";
      return;
    }
    default: out += "<function " + v.as_function().name + ">"; return;
  }
}

}  // namespace

std::string to_str(const Value& v, size_t max_bytes) {
  if (v.is_undefined()) return "";
  if (v.is_string()) {
    check_size(v.as_string(), max_bytes);
    return v.as_string();
  }
  return to_repr(v, max_bytes);
}

std::string to_repr(const Value& v, size_t max_bytes) {
  std::string out;
  repr_into(out, v, max_bytes);
  check_size(out, max_bytes);
  return out;
}

std::string to_json(const Value& v, int indent, bool sort_keys, size_t max_bytes) {
  std::string out;
  json_value(out, v, indent, sort_keys, 0, max_bytes);
  check_size(out, max_bytes);
  return out;
}

namespace text {

std::vector<uint32_t> decode(const std::string& s) {
  std::vector<uint32_t> out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const auto b = static_cast<unsigned char>(s[i]);
    size_t len = b < 0x80 ? 1 : (b >> 5) == 0x6 ? 2 : (b >> 4) == 0xE ? 3 : (b >> 3) == 0x1E ? 4 : 0;
    bool ok = len > 0 && i + len <= s.size();
    for (size_t k = 1; ok && k < len; ++k) ok = (static_cast<unsigned char>(s[i + k]) & 0xC0) == 0x80;
    if (!ok) {
      out.push_back(b);
      ++i;
      continue;
    }
    uint32_t cp = len == 1 ? b : len == 2 ? (b & 0x1F) : len == 3 ? (b & 0x0F) : (b & 0x07);
    for (size_t k = 1; k < len; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
    out.push_back(cp);
    i += len;
  }
  return out;
}

void append(std::string& out, uint32_t cp) { utf8::append_cp(out, cp); }

std::string encode(const std::vector<uint32_t>& cps) {
  std::string out;
  out.reserve(cps.size());
  for (uint32_t cp : cps) append(out, cp);
  return out;
}

bool is_space(uint32_t cp) { return utf8::is_python_space(cp); }

uint32_t to_upper(uint32_t cp) {
  if (cp >= 'a' && cp <= 'z') return cp - 32;
  if (cp >= 0xE0 && cp <= 0xFE && cp != 0xF7) return cp - 32;
  if (cp == 0xFF) return 0x178;
  if (cp >= 0x3B1 && cp <= 0x3C9 && cp != 0x3C2) return cp - 32;
  if (cp == 0x3C2) return 0x3A3;
  if (cp >= 0x430 && cp <= 0x44F) return cp - 32;
  if (cp >= 0x450 && cp <= 0x45F) return cp - 80;
  return cp;
}

uint32_t to_lower(uint32_t cp) {
  if (cp >= 'A' && cp <= 'Z') return cp + 32;
  if (cp >= 0xC0 && cp <= 0xDE && cp != 0xD7) return cp + 32;
  if (cp == 0x178) return 0xFF;
  if (cp >= 0x391 && cp <= 0x3A9 && cp != 0x3A2) return cp + 32;
  if (cp >= 0x410 && cp <= 0x42F) return cp + 32;
  if (cp >= 0x400 && cp <= 0x40F) return cp + 80;
  return cp;
}

bool is_cased(uint32_t cp) { return to_upper(cp) != cp || to_lower(cp) != cp || cp == 0xDF; }

}  // namespace text

}  // namespace tpshard::jinja
