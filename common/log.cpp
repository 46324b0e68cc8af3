// log.cpp: log level and status-line printer (see log.h).
#include "common/log.h"

#include <atomic>
#include <cstdarg>
#include <cstdio>

namespace tpshard {

namespace {
std::atomic<int> g_level{static_cast<int>(LogLevel::Info)};
}  // namespace

void set_log_level(LogLevel level) { g_level.store(static_cast<int>(level)); }

LogLevel log_level() { return static_cast<LogLevel>(g_level.load()); }

bool log_enabled(LogLevel level) { return static_cast<int>(level) <= g_level.load(); }

std::optional<LogLevel> parse_log_level(const std::string& text) {
  if (text == "quiet") return LogLevel::Quiet;
  if (text == "info") return LogLevel::Info;
  if (text == "verbose") return LogLevel::Verbose;
  return std::nullopt;
}

void log_line(LogLevel level, const char* fmt, ...) {
  if (!log_enabled(level)) return;
  va_list ap;
  va_start(ap, fmt);
  std::vfprintf(stderr, fmt, ap);
  va_end(ap);
  std::fflush(stderr);
}

}  // namespace tpshard
