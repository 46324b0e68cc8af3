// progress.h: the one progress reporter of the tools (convert's phases, weight loading, batch jobs), on
// stderr or a given stream. On a terminal: one line redrawn twice a second ("label [####....] status").
// Otherwise (a Slurm or CI log): the same status as a plain line at most every interval_s seconds, and a
// final line. Counters are atomic: worker threads may add concurrently.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>

namespace tpshard {

/// What a Progress counts: bytes (rate in GB/s) or prompts (rate in prompts/s, plus generated tokens/s).
enum class ProgressUnit { Bytes, Prompts };

class Progress {
 public:
  /// total: bytes or prompts of the whole job. enabled false: prints nothing (quiet runs, ranks that are
  /// not the output rank). interval_s: the least time between plain lines when `out` is not a terminal
  /// (0: a line at every add). out: stderr when null. already_done: prompts found done before this run (a
  /// resumed job): counted in done/total, not in the rates; announced in one line at construction.
  /// min_seconds: stay silent for a phase that ends sooner (a small model's load prints nothing).
  Progress(std::string label, uint64_t total, ProgressUnit unit, bool enabled, double interval_s = 10.0,
           std::FILE* out = nullptr, uint64_t already_done = 0, double min_seconds = 0.0);
  ~Progress();  ///< finish()
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  /// n more bytes or prompts done, with `tokens` generated tokens (prompts only). Thread-safe.
  void add(uint64_t n, int64_t tokens = 0);
  /// The final line (terminal: the bar, completed; otherwise the status, unless the last plain line
  /// already showed it). Idempotent.
  void finish();

  uint64_t done() const { return done_.load(std::memory_order_relaxed); }
  int64_t tokens() const { return tokens_.load(std::memory_order_relaxed); }
  double seconds() const;  ///< since construction
  /// The status without label or bar: bytes "1.50 GiB / 3.00 GiB  2.31 GB/s  ETA 1s", prompts
  /// "6/10  0.52 prompts/s  13.1 tok/s  ETA 8s".
  std::string status_text() const;

 private:
  void print(bool final_line);  // mu_ held

  std::string label_;
  uint64_t total_, already_done_;
  ProgressUnit unit_;
  bool enabled_, tty_;
  double interval_s_;
  double min_seconds_;
  std::FILE* out_;
  double t0_;
  std::atomic<uint64_t> done_;
  std::atomic<int64_t> tokens_{0};
  std::mutex mu_;
  double last_print_s_ = 0;
  uint64_t printed_done_ = UINT64_MAX;  ///< done() at the last plain line
  bool printed_ = false;                ///< anything was printed
  bool finished_ = false, stop_ = false;
  std::condition_variable cv_;
  std::thread thread_;  ///< terminal only: redraws the bar
};

/// Human-readable byte count: "512 B", "1.50 MiB", "3.21 GiB".
std::string human_bytes(uint64_t n);
/// "1h02m03s" / "4m05s" / "7s"; "?" for a negative or non-finite value.
std::string format_duration(double seconds);

}  // namespace tpshard
