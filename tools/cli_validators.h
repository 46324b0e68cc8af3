// cli_validators.h: CLI11 validators with readable messages for the tools' numeric options
// (CLI11 2.3's NonNegativeNumber / PositiveNumber print DBL_MAX in full as the range's bound), and the
// checks of file arguments that run before any model loads (input readable, output directory writable).
// They throw tpshard::Error naming the option, the path and the fix; they never create anything.
#pragma once
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>

#include "format/error.h"

namespace tpshard::cli {

/// Accepts numbers >= 0 (when strict is false) or > 0 (when strict is true).
inline CLI::Validator number_at_least_zero(bool strict) {
  return CLI::Validator(
      [strict](std::string& s) -> std::string {
        char* end = nullptr;
        const double v = std::strtod(s.c_str(), &end);
        if (s.empty() || end == s.c_str() || *end != '\0') return "'" + s + "' is not a number";
        if (!std::isfinite(v)) return "must be a finite number, got " + s;
        if (strict ? !(v > 0) : !(v >= 0)) return "must be " + std::string(strict ? "> 0" : ">= 0") + ", got " + s;
        return {};
      },
      strict ? "NUMBER > 0" : "NUMBER >= 0", strict ? "Positive" : "NonNegative");
}
inline CLI::Validator non_negative() { return number_at_least_zero(false); }
inline CLI::Validator positive() { return number_at_least_zero(true); }

/// number_at_least_zero for an option stored in a T: for an integral T the value must also be a decimal
/// integer that fits ("must be an integer, got 1.5", "must be at most 2147483647, got 1e99"), where
/// CLI11 alone says "Could not convert: --max-new-tokens = 1.5". For a floating-point T, the same as
/// number_at_least_zero.
template <typename T>
CLI::Validator number_at_least_zero_for(bool strict) {
  if constexpr (std::is_integral_v<T>) {
    return CLI::Validator(
        [strict](std::string& s) -> std::string {
          std::string number = s;
          const std::string why = number_at_least_zero(strict)(number);  // the messages for 0, -1, abc
          if (!why.empty()) return why;
          char* end = nullptr;
          errno = 0;
          const long long v = std::strtoll(s.c_str(), &end, 10);
          if (*end != '\0') return "must be an integer, got " + s;
          const auto max = static_cast<unsigned long long>(std::numeric_limits<T>::max());
          if (errno == ERANGE || static_cast<unsigned long long>(v) > max)
            return "must be at most " + std::to_string(max) + ", got " + s;
          return {};
        },
        strict ? "INT > 0" : "INT >= 0", strict ? "PositiveInt" : "NonNegativeInt");
  } else {
    return number_at_least_zero(strict);
  }
}
/// positive() / non_negative() for the option's variable `v` (its type picks the integer checks).
template <typename T>
CLI::Validator positive_for(const T&) { return number_at_least_zero_for<T>(true); }
template <typename T>
CLI::Validator non_negative_for(const T&) { return number_at_least_zero_for<T>(false); }

/// Accepts a fraction: numbers in (0, 1] (zero_allowed false: top_p) or [0, 1] (zero_allowed true: min_p).
inline CLI::Validator fraction(bool zero_allowed) {
  const std::string range = zero_allowed ? "[0, 1]" : "(0, 1]";
  return CLI::Validator(
      [zero_allowed, range](std::string& s) -> std::string {
        char* end = nullptr;
        const double v = std::strtod(s.c_str(), &end);
        if (s.empty() || end == s.c_str() || *end != '\0') return "'" + s + "' is not a number";
        if (!((zero_allowed ? v >= 0 : v > 0) && v <= 1)) return "must be in " + range + ", got " + s;
        return {};
      },
      "NUMBER in " + range, "Fraction");
}

/// Accepts decimal integers in [lo, hi]. `why`, when given, explains the bound in the message
/// ("must be an integer in 1..8 (4 x the 2 hardware threads of this machine), got 100000").
inline CLI::Validator integer_in_range(long long lo, long long hi, const std::string& why = {}) {
  const std::string range = std::to_string(lo) + ".." + std::to_string(hi);
  return CLI::Validator(
      [lo, hi, range, why](std::string& s) -> std::string {
        char* end = nullptr;
        errno = 0;
        const long long v = std::strtoll(s.c_str(), &end, 10);
        const bool parsed = !s.empty() && !std::isspace(static_cast<unsigned char>(s[0])) && *end == '\0';
        if (!parsed || errno == ERANGE || v < lo || v > hi)
          return "must be an integer in " + range + (why.empty() ? "" : " (" + why + ")") + ", got " + s;
        return {};
      },
      "INT in " + range, "IntegerInRange");
}

/// Accepts decimal integers in 0..2^64-1 (a seed). CLI11 alone reads "-1" as 2^64-1 and a too large
/// number as 2^64-1, silently.
inline CLI::Validator uint64_value() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        char* end = nullptr;
        errno = 0;
        (void)std::strtoull(s.c_str(), &end, 10);
        const bool digits = !s.empty() && std::isdigit(static_cast<unsigned char>(s[0])) && *end == '\0';
        if (!digits || errno == ERANGE) return "must be an integer in 0..18446744073709551615, got " + s;
        return {};
      },
      "INT in 0..2^64-1", "Uint64");
}

/// Accepts one comma-separated list of integers in 1..max ("2", "1,2,4"). Refuses empty items ("2,,4",
/// "2,"), which CLI11's own ->delimiter(',') drops silently. `what` names the bound in its message
/// ("the largest tp_size"). Pair with int_list_values() after parsing.
inline CLI::Validator positive_int_list(int max = 999999999, const std::string& what = "") {
  return CLI::Validator(
      [max, what](std::string& s) -> std::string {
        std::size_t start = 0;
        while (true) {
          const std::size_t comma = s.find(',', start);
          const std::string item = s.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
          if (item.empty()) return "has an empty item in '" + s + "' (write e.g. 1,2,4)";
          std::string number = item;
          const std::string why = positive()(number);  // "must be > 0, got -2", "'x' is not a number"
          if (!why.empty()) return why;
          char* end = nullptr;
          errno = 0;
          (void)std::strtol(item.c_str(), &end, 10);
          if (*end != '\0' || errno == ERANGE) return "must be an integer, got " + item;
          if (item.size() > 9 || std::strtol(item.c_str(), nullptr, 10) > max)
            return "must be at most " + std::to_string(max) + (what.empty() ? "" : " (" + what + ")") + ", got " + item;
          if (comma == std::string::npos) return {};
          start = comma + 1;
        }
      },
      "INT[,INT...]", "PositiveIntList");
}

/// The integers of lists accepted by positive_int_list(), in order ({"1,2", "4"} -> {1, 2, 4}).
inline std::vector<int> int_list_values(const std::vector<std::string>& lists) {
  std::vector<int> out;
  for (const std::string& s : lists) {
    std::size_t start = 0;
    while (start <= s.size()) {
      const std::size_t comma = s.find(',', start);
      out.push_back(std::atoi(s.substr(start, comma - start).c_str()));
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
  }
  return out;
}

/// Accepts any text but the empty string (`--stop ""` would otherwise match at every position).
inline CLI::Validator non_empty_text() {
  return CLI::Validator([](std::string& s) -> std::string { return s.empty() ? "must not be empty" : std::string(); },
                        "TEXT (not empty)", "NonEmpty");
}

/// tprun --threads (CPU threads per rank): 1 .. 4 x hardware_concurrency, or 1..1024 when that is
/// unknown. More threads than that only add context switches (the CPU backend splits each matmul into
/// one range per thread), and each one is a real OS thread per rank (100000 exhausted memory).
inline CLI::Validator cpu_threads_per_rank() {
  const unsigned hw = std::thread::hardware_concurrency();
  if (hw == 0) return integer_in_range(1, 1024, "this machine's hardware thread count is unknown");
  return integer_in_range(1, 4LL * hw, "4 x the " + std::to_string(hw) + " hardware threads of this machine");
}

/// `option` names the argument in messages ("--input", "--data"). Throws tpshard::Error unless `path`
/// exists, is not a directory and can be read by this process.
inline void check_input_file(const std::string& option, const std::string& path) {
  const std::string what = option + " " + path;
  TPS_CHECK(!path.empty(), option + ": empty path", "give the path of an existing file");
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    const int err = errno;
    TPS_CHECK(err != ENOENT && err != ENOTDIR, what + ": no such file",
              "check the path (relative paths start at the current directory " +
                  std::filesystem::current_path().string() + ")");
    throw Error(what + ": cannot be read (" + std::strerror(err) + ")", "check the path and its permissions");
  }
  TPS_CHECK(!S_ISDIR(st.st_mode), what + ": is a directory, not a file", "give the path of a file inside it");
  TPS_CHECK(::access(path.c_str(), R_OK) == 0, what + ": cannot be read (" + std::strerror(errno) + ")",
            "make it readable for this user (its owner can run chmod a+r " + path +
                ") or run as a user who can read it");
}

/// Throws tpshard::Error unless `path` can be written: its directory exists and is writable, and the
/// path is not a directory, nor an existing file this process cannot write. Creates nothing.
/// `label` starts the message ("generate --output"), `option` is what the hint says to change ("--output").
inline void check_output_file(const std::string& label, const std::string& path, const std::string& option) {
  const std::string what = label + " " + path;
  TPS_CHECK(!path.empty(), label + ": empty path", "give the path of the file to write");
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) {
    TPS_CHECK(!S_ISDIR(st.st_mode), what + ": is a directory", "pass a file path as " + option + ", e.g. " + path + "/out.jsonl");
    // A results file is read back (resume), synced and renamed: a device, pipe or socket cannot be one.
    TPS_CHECK(S_ISREG(st.st_mode), what + ": is not a regular file (a device, pipe or socket)",
              "pass a regular file as " + option + "; results are read back on a rerun, so they cannot go to a stream");
    TPS_CHECK(::access(path.c_str(), W_OK) == 0, what + ": exists and cannot be written (" + std::strerror(errno) + ")",
              "make it writable (chmod u+w " + path + ") or pass another " + option);
    return;
  }
  std::string dir = std::filesystem::path(path).parent_path().string();
  if (dir.empty()) dir = std::filesystem::current_path().string();
  struct stat dst {};
  if (::stat(dir.c_str(), &dst) != 0) {
    const int err = errno;
    TPS_CHECK(err != ENOENT, what + ": the directory " + dir + " does not exist",
              "create it first (mkdir -p " + dir + ") or pass another " + option);
    throw Error(what + ": the directory " + dir + " cannot be used (" + std::strerror(err) + ")",
                "pass another " + option + " in a directory you can write to");
  }
  TPS_CHECK(S_ISDIR(dst.st_mode), what + ": " + dir + " is not a directory",
            "pass another " + option + " in an existing directory");
  TPS_CHECK(::access(dir.c_str(), W_OK | X_OK) == 0,
            what + ": the directory " + dir + " is not writable (" + std::strerror(errno) + ")",
            "pass another " + option + " in a directory you can write to, or fix its permissions");
}

/// Throws tpshard::Error when an output (option, path) names the same file as an input or another output:
/// the same path spelled differently, a hard or symbolic link (std::filesystem::equivalent when both
/// exist), or, for paths not created yet, the same normalized absolute path. Inputs may coincide with
/// each other. Empty paths are skipped.
inline void check_distinct_files(const std::string& label,
                                 const std::vector<std::pair<std::string, std::string>>& inputs,
                                 const std::vector<std::pair<std::string, std::string>>& outputs) {
  namespace fs = std::filesystem;
  auto same = [](const std::string& a, const std::string& b) {
    std::error_code ec;
    if (fs::exists(a, ec) && fs::exists(b, ec)) return fs::equivalent(a, b, ec) && !ec;
    return fs::weakly_canonical(fs::absolute(a, ec), ec) == fs::weakly_canonical(fs::absolute(b, ec), ec);
  };
  std::vector<std::pair<std::string, std::string>> seen = inputs;
  for (const auto& out : outputs) {
    for (const auto& other : seen) {
      if (out.second.empty() || other.second.empty()) continue;
      TPS_CHECK(!same(out.second, other.second),
                label + ": " + other.first + " " + other.second + " and " + out.first + " " + out.second +
                    " are the same file",
                "pass a different " + out.first + " (writing it would overwrite " + other.first + ")");
    }
    seen.push_back(out);
  }
}

}  // namespace tpshard::cli
