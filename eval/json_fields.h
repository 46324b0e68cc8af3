// json_fields.h: reading integer fields of JSON records (JSONL prompt lines, eval data records) without
// silent narrowing: nlohmann's get<int>() turns 4294967297 into 1 and get<uint64_t>() turns -3 into
// 2^64-3. Owns the range check and its one error text; does not own which fields a record has.
#pragma once
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>

#include <nlohmann/json.hpp>

#include "format/error.h"

namespace tpshard::eval {

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
