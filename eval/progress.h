// progress.h: progress of a long batch job on stderr.
// Terminal (stderr isatty): one redrawn bar line "label [####....] done/total  p/s  tok/s  ETA".
// Otherwise: the same figures as a plain line at most every interval_s seconds, and at the end.
#pragma once
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace tpshard::eval {

class Progress {
 public:
  /// total: items of the job; already_done: items found done before this run (counted in done/total but
  /// not in the rates). enabled = false prints nothing (non-zero tp ranks). out defaults to stderr.
  Progress(std::string label, size_t total, size_t already_done, bool enabled, double interval_s = 10.0,
           std::FILE* out = nullptr);
  /// Record that `items` more items finished, having generated `tokens` tokens.
  void advance(size_t items, int64_t tokens);
  /// Print the final line (newline-terminated).
  void finish();

  double elapsed_s() const;
  size_t done() const { return done_; }
  int64_t tokens() const { return tokens_; }
  /// The status text without bar: "done/total  X prompts/s  Y tok/s  ETA Z" (for tests and logs).
  std::string status_text() const;

 private:
  void print(bool final_line);

  std::string label_;
  size_t total_, already_done_, done_;
  size_t printed_done_ = static_cast<size_t>(-1);  ///< done_ at the last print
  int64_t tokens_ = 0;
  bool enabled_, tty_;
  double interval_s_;
  std::FILE* out_;
  std::chrono::steady_clock::time_point start_, last_print_;
};

/// "1h02m03s" / "4m05s" / "7s".
std::string format_duration(double seconds);

}  // namespace tpshard::eval
