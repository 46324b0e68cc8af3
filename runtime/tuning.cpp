// tuning.cpp: the one reader of TPSHARD_* / TPRUN_* runtime switches (see tuning.h, docs/TUNING.md).
#include "runtime/tuning.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <algorithm>

#include "format/error.h"

namespace tpshard {
namespace {

constexpr const char* kComm = "TPSHARD_COMM";
constexpr const char* kNoCustomAllReduce = "TPSHARD_NO_CUSTOM_ALL_REDUCE";
constexpr const char* kCustomAllReduceTimeout = "TPSHARD_CUSTOM_ALL_REDUCE_TIMEOUT_S";
constexpr const char* kNcclTimeout = "TPRUN_NCCL_TIMEOUT";
constexpr const char* kNoCudaGraphs = "TPSHARD_NO_CUDA_GRAPHS";
constexpr const char* kNoLookahead = "TPSHARD_NO_LOOKAHEAD";
constexpr const char* kNoSharedPrefix = "TPSHARD_NO_SHARED_PREFIX";
constexpr const char* kCascadeAttention = "TPSHARD_CASCADE_ATTENTION";
constexpr const char* kNoPdl = "TPSHARD_NO_PDL";
constexpr const char* kLoadDirectIo = "TPSHARD_LOAD_DIRECT_IO";
constexpr const char* kSyncCheck = "TPSHARD_SYNC_CHECK";
constexpr const char* kShareGpus = "TPSHARD_TEST_SHARE_GPUS";
constexpr const char* kLogLevel = "TPSHARD_LOG_LEVEL";
// Other programs' variables that tprun honours (read leniently: a value tprun cannot use is ignored).
constexpr const char* kOmpNumThreads = "OMP_NUM_THREADS";
constexpr const char* kGlooSocketIfname = "GLOO_SOCKET_IFNAME";

[[noreturn]] void illegal(const char* name, const std::string& value, const std::string& legal) {
  throw Error("environment variable " + std::string(name) + "='" + value + "' is not legal (legal: " + legal + ")",
              "fix or unset " + std::string(name) + " (docs/TUNING.md lists every variable)");
}

/// The value of `name`, or nullptr when unset or empty.
const char* value_of(const EnvLookup& lookup, const char* name) {
  const char* v = lookup(name);
  return (v && *v) ? v : nullptr;
}

/// "1" switches the variable on, "0" / unset / empty leave it off.
bool flag(const EnvLookup& lookup, const char* name) {
  const char* v = value_of(lookup, name);
  if (!v) return false;
  if (std::strcmp(v, "0") == 0) return false;
  if (std::strcmp(v, "1") == 0) return true;
  illegal(name, v, "0 or 1");
}

/// A decimal number in [lo, hi]; `fallback` when unset or empty.
double number(const EnvLookup& lookup, const char* name, double fallback, double lo, double hi, const char* legal) {
  const char* v = value_of(lookup, name);
  if (!v) return fallback;
  const size_t len = std::strlen(v);
  if (std::strspn(v, "0123456789.") != len || std::strchr(v, '.') != std::strrchr(v, '.') || v[0] == '.')
    illegal(name, v, legal);
  errno = 0;
  char* end = nullptr;
  const double x = std::strtod(v, &end);
  if (errno != 0 || end != v + len || x < lo || x > hi) illegal(name, v, legal);
  return x;
}

}  // namespace

const std::vector<TuningVariable>& tuning_variables() {
  static const std::vector<TuningVariable> vars = {
      {kComm, "auto, nccl", "auto"},
      {kNoCustomAllReduce, "0, 1", "0"},
      {kCustomAllReduceTimeout, "seconds, 0 (no limit) .. 1e6", "300"},
      {kNcclTimeout, "seconds, > 0 .. 1e6", "300"},
      {kNoCudaGraphs, "0, 1", "0"},
      {kNoLookahead, "0, 1", "0"},
      {kNoPdl, "0, 1", "0"},
      {kNoSharedPrefix, "0, 1", "0"},
      {kCascadeAttention, "0, 1", "0"},
      {kLoadDirectIo, "0, 1", "0"},
      {kSyncCheck, "0, 1", "0"},
      {kShareGpus, "0, 1", "0"},
      {kLogLevel, "quiet, info, verbose", "info"},
      {kOmpNumThreads, "a positive integer (of a nested list, the first)", "unset"},
      {kGlooSocketIfname, "a network interface name", "unset"},
  };
  return vars;
}

Tuning parse_tuning(const EnvLookup& lookup) {
  Tuning t;
  if (const char* c = value_of(lookup, kComm)) {
    if (std::strcmp(c, "nccl") == 0)
      t.force_nccl = true;
    else if (std::strcmp(c, "auto") != 0)
      illegal(kComm, c, "auto (local for tp 1, peer on one NVLink host, else NCCL) or nccl (force NCCL)");
  }
  t.custom_all_reduce = !flag(lookup, kNoCustomAllReduce);
  t.custom_all_reduce_timeout_s =
      number(lookup, kCustomAllReduceTimeout, t.custom_all_reduce_timeout_s, 0.0, 1e6, "seconds, 0 (no limit) to 1e6");
  t.nccl_timeout_s = number(lookup, kNcclTimeout, t.nccl_timeout_s, 0.0, 1e6, "seconds, more than 0 and at most 1e6");
  if (t.nccl_timeout_s <= 0.0) illegal(kNcclTimeout, value_of(lookup, kNcclTimeout), "seconds, more than 0 and at most 1e6");
  t.cuda_graphs = !flag(lookup, kNoCudaGraphs);
  t.lookahead = !flag(lookup, kNoLookahead);
  t.shared_prefix = !flag(lookup, kNoSharedPrefix);
  t.cascade_attention = flag(lookup, kCascadeAttention);
  t.pdl = !flag(lookup, kNoPdl);
  t.load_direct_io = flag(lookup, kLoadDirectIo);
  t.sync_check = flag(lookup, kSyncCheck);
  t.share_gpus = flag(lookup, kShareGpus);
  if (const char* v = value_of(lookup, kLogLevel)) {
    t.log_level = parse_log_level(v);
    if (!t.log_level) illegal(kLogLevel, v, "quiet, info or verbose");
  }
  if (const char* v = value_of(lookup, kOmpNumThreads)) {
    char* end = nullptr;
    const long n = std::strtol(v, &end, 10);  // "4,2" (nested levels): the first level
    if (end != v && n > 0) t.omp_num_threads = static_cast<int>(std::min<long>(n, 1 << 20));
  }
  if (const char* v = value_of(lookup, kGlooSocketIfname)) t.gloo_socket_ifname = v;
  return t;
}

std::optional<LogLevel> log_level_from_environment() {
  return parse_tuning([](const char* name) -> const char* {
           return std::strcmp(name, kLogLevel) == 0 ? std::getenv(name) : nullptr;
         }).log_level;
}

const Tuning& tuning() {
  // A throwing initializer leaves the static uninitialized: the next call parses (and throws) again.
  static const Tuning t = parse_tuning([](const char* name) -> const char* { return std::getenv(name); });
  return t;
}

}  // namespace tpshard
