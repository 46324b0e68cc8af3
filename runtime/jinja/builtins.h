// builtins.h: what templates call: filters, tests, attribute/item access with Python methods, globals.
// Owns: jinja2's filters that chat templates use (trim, length/count, upper, lower, title, capitalize,
// replace, default/d, join, first, last, list, items, tojson (transformers' json.dumps), string, int, float,
// abs, round, reverse, sort, unique, sum, min, max, select/reject, selectattr/rejectattr, map, indent, safe),
// its tests (defined, undefined, none, string, number, integer, float, boolean, true, false, mapping,
// sequence, iterable, callable, even, odd, divisibleby, eq/==, ne, lt, le, gt, ge, in, lower, upper, sameas),
// the sandbox's attribute rules with the str/dict/list methods (strip, lstrip, rstrip, split, rsplit,
// startswith, endswith, upper, lower, replace, title, capitalize, find, count, join, format-free), and the
// globals range, namespace, dict, raise_exception, strftime_now.
#pragma once
#include <string>

#include "runtime/jinja/interpreter.h"
#include "runtime/jinja/value.h"

namespace tpshard::jinja {

/// obj.name (sandboxed getattr, then obj[name]); undefined when missing; Error on an undefined obj.
Value get_attr(Interpreter& in, const Value& obj, const std::string& name);
/// obj[key] (then getattr for a string key); undefined when missing; Error on an undefined obj.
Value get_item(Interpreter& in, const Value& obj, const Value& key);
/// obj[start:stop:step] for strings (by code point) and lists; parts may be undefined (absent).
Value slice(Interpreter& in, const Value& obj, const Value& start, const Value& stop, const Value& step);
/// value | name(args, kwargs). Throws Error for an unknown filter.
Value apply_filter(Interpreter& in, const std::string& name, const Value& v, const ValueList& args, const KwArgs& kw);
/// value is name(args). Throws Error for an unknown test.
bool apply_test(Interpreter& in, const std::string& name, const Value& v, const ValueList& args);
/// Whether a filter / test of that name exists (checked when parsing, as jinja2 does when compiling).
bool has_filter(const std::string& name);
bool has_test(const std::string& name);
/// The items a for loop or a filter iterates: list items, dict keys, string characters; none for undefined.
ValueList iterate(const Value& v);
/// Python `item in container`.
bool contains(const Value& container, const Value& item);
/// The global functions, as a dict of name -> function.
Dict global_functions();

}  // namespace tpshard::jinja
