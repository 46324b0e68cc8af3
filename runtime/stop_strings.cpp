// stop_strings.cpp: plain substring search over the part of the text that new tokens can affect.
#include "runtime/stop_strings.h"

#include <algorithm>

namespace tpshard {

size_t find_stop_string(const std::string& text, size_t old_size, const std::vector<std::string>& stops) {
  size_t best = std::string::npos;
  for (const std::string& s : stops) {
    if (s.empty()) continue;
    // An occurrence that ends after old_size starts at or after old_size - (len - 1).
    const size_t from = old_size >= s.size() ? old_size - s.size() + 1 : 0;
    const size_t at = text.find(s, from);
    if (at != std::string::npos) best = std::min(best, at);
  }
  return best;
}

size_t stop_string_holdback(const std::string& text, const std::vector<std::string>& stops) {
  size_t hold = 0;
  for (const std::string& s : stops) {
    for (size_t len = std::min(s.size() - (s.empty() ? 0 : 1), text.size()); len > hold; --len) {
      if (text.compare(text.size() - len, len, s, 0, len) == 0) {
        hold = len;
        break;
      }
    }
  }
  return hold;
}

}  // namespace tpshard
