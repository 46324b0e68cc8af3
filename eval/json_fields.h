// json_fields.h: reading integer fields of JSON records (JSONL prompt lines, eval data records) without
// silent narrowing: nlohmann's get<int>() turns 4294967297 into 1 and get<uint64_t>() turns -3 into
// 2^64-3. Owns the range check and its one error text; does not own which fields a record has.
#pragma once
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>

#include <nlohmann/json.hpp>

#include "format/error.h"

namespace tpshard::eval {

/// The value of `v` when it is a JSON integer in lo..hi. Anything else (a fraction such as 2.5, a float
/// literal such as 1e30 or 4.0, a string, an integer outside the range) throws
/// Error("WHERE: \"NAME\" is VALUE, expected an integer in LO..HI", hint).
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
                    ", expected an integer in " + std::to_string(lo) + ".." + std::to_string(hi),
                hint);
  return value;
}

}  // namespace tpshard::eval
