// cli_validators.h: CLI11 validators with readable messages for the tools' numeric options
// (CLI11 2.3's NonNegativeNumber / PositiveNumber print DBL_MAX in full as the range's bound).
#pragma once
#include <cstdlib>
#include <string>

#include <CLI/CLI.hpp>

namespace tpshard::cli {

/// Accepts numbers >= 0 (when strict is false) or > 0 (when strict is true).
inline CLI::Validator number_at_least_zero(bool strict) {
  return CLI::Validator(
      [strict](std::string& s) -> std::string {
        char* end = nullptr;
        const double v = std::strtod(s.c_str(), &end);
        if (s.empty() || end == s.c_str() || *end != '\0') return "'" + s + "' is not a number";
        if (strict ? !(v > 0) : !(v >= 0)) return "must be " + std::string(strict ? "> 0" : ">= 0") + ", got " + s;
        return {};
      },
      strict ? "NUMBER > 0" : "NUMBER >= 0", strict ? "Positive" : "NonNegative");
}
inline CLI::Validator non_negative() { return number_at_least_zero(false); }
inline CLI::Validator positive() { return number_at_least_zero(true); }

}  // namespace tpshard::cli
