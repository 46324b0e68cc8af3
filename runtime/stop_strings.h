// stop_strings.h: stop-string matching on growing generated text, and how much of the text can be
// streamed without ever printing part of a stop string.
#pragma once
#include <string>
#include <vector>

namespace tpshard {

/// Start of the earliest occurrence of any stop string in text that ends after byte `old_size`
/// (text[0, old_size) was checked before), or std::string::npos.
size_t find_stop_string(const std::string& text, size_t old_size, const std::vector<std::string>& stops);

/// Bytes at the end of text that are a proper prefix of some stop string (hold them back when streaming:
/// they might become a stop string).
size_t stop_string_holdback(const std::string& text, const std::vector<std::string>& stops);

}  // namespace tpshard
