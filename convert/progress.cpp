// progress.cpp: Progress (terminal progress line) and human_bytes.
#include "convert/progress.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>

namespace tpshard {

namespace {
double now_s() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
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

Progress::Progress(std::string label, uint64_t total_bytes, bool enabled)
    : label_(std::move(label)), total_(total_bytes), tty_(enabled && ::isatty(STDERR_FILENO)), t0_(now_s()) {
  if (!tty_) return;
  thread_ = std::thread([this] {
    std::unique_lock<std::mutex> lock(mu_);
    while (!stop_) {
      cv_.wait_for(lock, std::chrono::milliseconds(500));
      if (!stop_) draw();
    }
  });
}

Progress::~Progress() {
  if (!tty_) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
  std::fprintf(stderr, "\r\033[K");
  std::fflush(stderr);
}

double Progress::seconds() const { return now_s() - t0_; }

void Progress::draw() {
  const uint64_t d = done();
  const double t = seconds();
  const double rate = t > 0 ? d / t : 0;
  const double eta = rate > 0 && total_ > d ? (total_ - d) / rate : 0;
  std::fprintf(stderr, "\r\033[K%s %s / %s  %.2f GB/s  ETA %.0fs", label_.c_str(), human_bytes(d).c_str(),
               human_bytes(total_).c_str(), rate / 1e9, eta);
  std::fflush(stderr);
}

}  // namespace tpshard
