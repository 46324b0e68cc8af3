// progress.h: the converter's progress line (bytes, GB/s, ETA) on a terminal, refreshed twice a
// second; nothing while running when stderr is not a tty. Counters are atomic (workers add to them).
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>

namespace tpshard {

class Progress {
 public:
  /// `enabled` false (or stderr not a tty): no output at all.
  Progress(std::string label, uint64_t total_bytes, bool enabled);
  ~Progress();  ///< stops the refresh thread and clears the line
  void add(uint64_t n) { done_.fetch_add(n, std::memory_order_relaxed); }
  uint64_t done() const { return done_.load(); }
  double seconds() const;

 private:
  void draw();
  std::string label_;
  uint64_t total_;
  std::atomic<uint64_t> done_{0};
  bool tty_;
  double t0_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

/// Human-readable byte count: "512 B", "1.50 MiB", "3.21 GiB".
std::string human_bytes(uint64_t n);

}  // namespace tpshard
