// log.h: the tools' log level and the one printer of their status lines on stderr. Quiet: errors and
// the results only (what a script parses); Info (default): the status lines (backend, choices made,
// closing stats, progress); Verbose: also the details behind them (resolved options, per-rank load times).
// Errors and warnings are printed whatever the level (they do not go through here). tprun sets the level
// from -q / -v, else TPSHARD_LOG_LEVEL (runtime/tuning.h); tpshard convert from -q, else TPSHARD_LOG_LEVEL.
#pragma once
#include <optional>
#include <string>

namespace tpshard {

enum class LogLevel { Quiet = 0, Info = 1, Verbose = 2 };

/// The process-wide level (Info until set). Thread-safe.
void set_log_level(LogLevel level);
LogLevel log_level();
/// True when lines of `level` are printed.
bool log_enabled(LogLevel level);
/// "quiet" / "info" / "verbose" -> the level; nullopt for anything else.
std::optional<LogLevel> parse_log_level(const std::string& text);

/// printf-style line (give the trailing newline) to stderr when log_enabled(level); flushed.
void log_line(LogLevel level, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

}  // namespace tpshard
