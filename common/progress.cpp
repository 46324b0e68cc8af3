// progress.cpp: the progress reporter (see progress.h).
#include "common/progress.h"

#include <unistd.h>

#include <chrono>
#include <cmath>

namespace tpshard {

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

std::string human_bytes(uint64_t n) {
  char b[32];
  if (n < 1024) std::snprintf(b, sizeof b, "%llu B", static_cast<unsigned long long>(n));
  else if (n < (1ull << 20)) std::snprintf(b, sizeof b, "%.2f KiB", n / 1024.0);
  else if (n < (1ull << 30)) std::snprintf(b, sizeof b, "%.2f MiB", n / 1048576.0);
  else std::snprintf(b, sizeof b, "%.2f GiB", n / 1073741824.0);
  return b;
}

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const long s = std::lround(seconds);
  char buf[32];
  if (s >= 3600) std::snprintf(buf, sizeof buf, "%ldh%02ldm%02lds", s / 3600, (s / 60) % 60, s % 60);
  else if (s >= 60) std::snprintf(buf, sizeof buf, "%ldm%02lds", s / 60, s % 60);
  else std::snprintf(buf, sizeof buf, "%lds", s);
  return buf;
}

Progress::Progress(std::string label, uint64_t total, ProgressUnit unit, bool enabled, double interval_s,
                   std::FILE* out, uint64_t already_done, double min_seconds)
    : label_(std::move(label)),
      total_(total),
      already_done_(already_done),
      unit_(unit),
      enabled_(enabled),
      interval_s_(interval_s),
      min_seconds_(min_seconds),
      out_(out != nullptr ? out : stderr),
      t0_(now_s()),
      done_(already_done) {
  tty_ = enabled_ && ::isatty(::fileno(out_)) != 0;
  last_print_s_ = t0_;
  if (enabled_ && already_done_ > 0)
    std::fprintf(out_, "%s: resuming, %llu of %llu already done\n", label_.c_str(),
                 static_cast<unsigned long long>(already_done_), static_cast<unsigned long long>(total_));
  if (!tty_) return;
  thread_ = std::thread([this] {
    std::unique_lock<std::mutex> lock(mu_);
    while (!stop_) {
      cv_.wait_for(lock, std::chrono::milliseconds(500));
      if (!stop_ && seconds() >= min_seconds_) print(false);
    }
  });
}

Progress::~Progress() { finish(); }

double Progress::seconds() const { return now_s() - t0_; }

std::string Progress::status_text() const {
  const double t = seconds();
  const uint64_t d = done();
  const double rate = t > 0 ? static_cast<double>(d - already_done_) / t : 0.0;
  const double eta = rate > 0 && total_ > d ? static_cast<double>(total_ - d) / rate : (d >= total_ ? 0.0 : NAN);
  char buf[192];
  if (unit_ == ProgressUnit::Bytes) {
    std::snprintf(buf, sizeof buf, "%s / %s  %.2f GB/s  ETA %s", human_bytes(d).c_str(), human_bytes(total_).c_str(),
                  rate / 1e9, format_duration(eta).c_str());
  } else {
    const double tok_rate = t > 0 ? static_cast<double>(tokens()) / t : 0.0;
    std::snprintf(buf, sizeof buf, "%llu/%llu  %.2f prompts/s  %.1f tok/s  ETA %s", static_cast<unsigned long long>(d),
                  static_cast<unsigned long long>(total_), rate, tok_rate, format_duration(eta).c_str());
  }
  return buf;
}

void Progress::add(uint64_t n, int64_t tokens) {
  done_.fetch_add(n, std::memory_order_relaxed);
  tokens_.fetch_add(tokens, std::memory_order_relaxed);
  if (!enabled_ || tty_) return;  // the terminal's bar is redrawn by thread_
  const double now = now_s();
  if (now - last_print_s_ < interval_s_ || now - t0_ < min_seconds_) return;
  std::unique_lock<std::mutex> lock(mu_, std::try_to_lock);  // another thread is printing: skip this one
  if (!lock.owns_lock() || finished_ || now - last_print_s_ < interval_s_) return;
  last_print_s_ = now;
  print(false);
}

void Progress::finish() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (finished_) return;
    finished_ = true;
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (!enabled_) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (!tty_ && printed_done_ == done()) return;  // the last plain line already shows the end
  if (!printed_ && seconds() < min_seconds_) return;  // a short phase: silent
  print(true);
}

void Progress::print(bool final_line) {
  printed_ = true;
  const std::string status = status_text();
  if (tty_) {
    constexpr int kWidth = 30;
    const uint64_t d = done();
    const int filled = total_ > 0 ? static_cast<int>(kWidth * std::min<uint64_t>(d, total_) / total_) : kWidth;
    std::string bar(static_cast<size_t>(filled), '#');
    bar.resize(kWidth, '.');
    std::fprintf(out_, "\r\033[K%s [%s] %s%s", label_.c_str(), bar.c_str(), status.c_str(), final_line ? "\n" : "");
  } else {
    printed_done_ = done();
    std::fprintf(out_, "%s: %s\n", label_.c_str(), status.c_str());
  }
  std::fflush(out_);
}

}  // namespace tpshard
