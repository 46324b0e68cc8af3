// progress.cpp: progress bar / periodic progress lines (see progress.h).
#include "eval/progress.h"

#include <unistd.h>

#include <cmath>

namespace tpshard::eval {

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  long s = std::lround(seconds);
  char buf[32];
  if (s >= 3600)
    std::snprintf(buf, sizeof buf, "%ldh%02ldm%02lds", s / 3600, (s / 60) % 60, s % 60);
  else if (s >= 60)
    std::snprintf(buf, sizeof buf, "%ldm%02lds", s / 60, s % 60);
  else
    std::snprintf(buf, sizeof buf, "%lds", s);
  return buf;
}

Progress::Progress(std::string label, size_t total, size_t already_done, bool enabled, double interval_s,
                   std::FILE* out)
    : label_(std::move(label)),
      total_(total),
      already_done_(already_done),
      done_(already_done),
      enabled_(enabled),
      interval_s_(interval_s),
      out_(out != nullptr ? out : stderr),
      start_(std::chrono::steady_clock::now()),
      last_print_(start_) {
  tty_ = enabled_ && ::isatty(::fileno(out_)) != 0;
  if (enabled_ && already_done_ > 0)
    std::fprintf(out_, "%s: resuming, %zu of %zu already done\n", label_.c_str(), already_done_, total_);
}

double Progress::elapsed_s() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

std::string Progress::status_text() const {
  double t = elapsed_s();
  size_t new_items = done_ - already_done_;
  double items_per_s = t > 0 ? static_cast<double>(new_items) / t : 0.0;
  double tok_per_s = t > 0 ? static_cast<double>(tokens_) / t : 0.0;
  double eta = items_per_s > 0 ? static_cast<double>(total_ - done_) / items_per_s : NAN;
  char buf[160];
  std::snprintf(buf, sizeof buf, "%zu/%zu  %.2f prompts/s  %.1f tok/s  ETA %s", done_, total_, items_per_s, tok_per_s,
                done_ >= total_ ? "0s" : format_duration(eta).c_str());
  return buf;
}

void Progress::advance(size_t items, int64_t tokens) {
  done_ += items;
  tokens_ += tokens;
  if (!enabled_) return;
  auto now = std::chrono::steady_clock::now();
  if (tty_ || std::chrono::duration<double>(now - last_print_).count() >= interval_s_) {
    last_print_ = now;
    print(false);
  }
}

void Progress::finish() {
  if (!enabled_) return;
  if (!tty_ && printed_done_ == done_) return;  // the last plain line already shows the end
  print(true);
}

void Progress::print(bool final_line) {
  printed_done_ = done_;
  std::string status = status_text();
  if (tty_) {
    constexpr int kWidth = 30;
    int filled = total_ > 0 ? static_cast<int>(kWidth * done_ / total_) : kWidth;
    std::string bar(static_cast<size_t>(filled), '#');
    bar.resize(kWidth, '.');
    std::fprintf(out_, "\r\033[K%s [%s] %s%s", label_.c_str(), bar.c_str(), status.c_str(), final_line ? "\n" : "");
  } else {
    std::fprintf(out_, "%s: %s\n", label_.c_str(), status.c_str());
  }
  std::fflush(out_);
}

}  // namespace tpshard::eval
