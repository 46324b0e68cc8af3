// json_fields.h: reading JSON records (JSONL prompt lines, eval data records) without nlohmann's silent
// defaults: a line is parsed with the column of a syntax error and with repeated keys refused (nlohmann
// keeps the last), and integer fields are read without narrowing (get<int>() turns 4294967297 into 1,
// get<uint64_t>() turns -3 into 2^64-3). Owns those checks and their error texts; does not own which
// fields a record has.
#pragma once
#include <cmath>
#include <cstdint>
#include <istream>
#include <limits>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

#include <nlohmann/json.hpp>

#include "format/error.h"
#include "format/json_depth.h"
#include "format/json_error.h"

namespace tpshard::eval {

/// Longest JSONL line the readers take (a prompt line far beyond any model's context): a file without
/// newlines, or a device such as /dev/zero, would otherwise grow memory until the process is killed.
constexpr size_t kMaxJsonlLineBytes = size_t(64) << 20;

/// std::getline(in, line) that throws Error(where_prefix + ":" + LINE_NO + ...) once a line passes
/// kMaxJsonlLineBytes (line_no: the number the line being read will have). False at the end of input.
inline bool getline_bounded(std::istream& in, std::string& line, const std::string& path, size_t line_no) {
  line.clear();
  std::streambuf* const sb = in.rdbuf();
  for (;;) {
    const int c = sb->sbumpc();
    if (c == std::char_traits<char>::eof()) {
      in.setstate(std::ios::eofbit);
      return !line.empty();
    }
    if (c == '\n') return true;
    line.push_back(static_cast<char>(c));
    if (line.size() > kMaxJsonlLineBytes)
      throw Error(path + ":" + std::to_string(line_no) + ": line longer than " + std::to_string(kMaxJsonlLineBytes >> 20) +
                      " MiB (not a JSON Lines file?)",
                  "give a JSON Lines file: one JSON object per line");
  }
}

/// One JSONL line as a JSON value. Throws Error(hint) for
///   a syntax error: "WHERE:COLUMN: not valid JSON: REASON" (COLUMN 1-based, REASON nlohmann's text, e.g.
///   "syntax error while parsing object - unexpected end of input; expected '}'");
///   a key repeated in one object: "WHERE: key "K" appears twice in one object" (nlohmann would keep the last).
inline nlohmann::json parse_jsonl_line(const std::string& line, const std::string& where, const std::string& hint) {
  using Event = nlohmann::json::parse_event_t;
  std::vector<std::set<std::string>> keys;  // of each object being parsed, innermost last
  std::string repeated;
  const nlohmann::json::parser_callback_t track = [&](int, Event ev, nlohmann::json& parsed) {
    if (ev == Event::object_start) {
      keys.emplace_back();
    } else if (ev == Event::object_end) {
      if (!keys.empty()) keys.pop_back();
    } else if (ev == Event::key && repeated.empty() && !keys.empty() && parsed.is_string() &&
               !keys.back().insert(parsed.get<std::string>()).second) {
      repeated = parsed.get<std::string>();
    }
    return true;
  };
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(line, json_depth_guard(where, track));
  } catch (const nlohmann::json::parse_error& e) {
    // nlohmann: "[json.exception.parse_error.101] parse error at line 1, column 37: REASON"
    const std::string text = e.what();
    const size_t col = text.find("column "), colon = col == std::string::npos ? col : text.find(": ", col);
    if (colon == std::string::npos) throw Error(where + ": not valid JSON: " + text, hint);
    throw Error(where + ":" + text.substr(col + 7, colon - col - 7) + ": not valid JSON: " + text.substr(colon + 2), hint);
  } catch (const nlohmann::json::exception& e) {  // e.g. a number beyond double's range (1e320): out_of_range
    throw Error(where + ": not valid JSON: " + json_error_text(e), hint);
  }
  if (!repeated.empty()) throw Error(where + ": key \"" + repeated + "\" appears twice in one object", hint);
  return j;
}

/// What a JSON number that nlohmann parsed as a float was, for the error text: its value is shown as
/// parsed (1e3 as 1000.0), so say why it is not an integer. nlohmann parses a literal with '.', 'e' or
/// 'E' as a float, and also an integer literal beyond the 64-bit range (18446744073709551616).
inline std::string json_float_kind(double x) {
  // 2^64 and -2^63 are exact doubles. Integer literals >= 2^64 or < -2^63 fit neither uint64_t nor
  // int64_t; those just below -2^63 round to -2^63 itself, as does "-9.223372036854775808e18".
  constexpr double kTwo64 = 18446744073709551616.0, kMinusTwo63 = -9223372036854775808.0;
  if (!std::isfinite(x) || x >= kTwo64 || x < kMinusTwo63) return "a number beyond the 64-bit integer range";
  if (x == kMinusTwo63) return "an integer beyond the 64-bit range, or a number written with a fraction or exponent";
  if (x != std::floor(x)) return "a number with a fraction";
  return "a number written with a fraction or exponent";
}

/// The value of `v` when it is a JSON integer in lo..hi. Anything else (a fraction such as 2.5, a float
/// literal such as 1e30 or 4.0, a string, an integer outside the range) throws
/// Error("WHERE: \"NAME\" is VALUE, expected an integer in LO..HI", hint); a number parsed as a float
/// adds what it is after VALUE ("is 1000.0 (a number written with a fraction or exponent)").
template <typename T>
T json_integer(const nlohmann::json& v, T lo, T hi, const std::string& where, const std::string& name,
               const std::string& hint) {
  static_assert(std::is_integral_v<T> && !std::is_same_v<T, bool>, "json_integer reads integer types");
  bool fits = false;
  T value = 0;
  if (v.is_number_unsigned()) {  // a literal >= 0
    const uint64_t u = v.get<uint64_t>();
    fits = u <= static_cast<uint64_t>(std::numeric_limits<T>::max());
    if (fits) value = static_cast<T>(u);
  } else if (v.is_number_integer()) {  // a negative literal
    const int64_t s = v.get<int64_t>();
    if constexpr (std::is_signed_v<T>) {
      fits = s >= static_cast<int64_t>(std::numeric_limits<T>::min()) &&
             s <= static_cast<int64_t>(std::numeric_limits<T>::max());
    } else {
      fits = s >= 0;
    }
    if (fits) value = static_cast<T>(s);
  }
  if (!fits || value < lo || value > hi)
    throw Error(where + ": \"" + name + "\" is " + v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) +
                    (v.is_number_float() ? " (" + json_float_kind(v.get<double>()) + ")" : std::string()) +
                    ", expected an integer in " + std::to_string(lo) + ".." + std::to_string(hi),
                hint);
  return value;
}

}  // namespace tpshard::eval
