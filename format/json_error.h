// json_error.h: the text of a nlohmann::json exception for our messages, without the library's tag.
#pragma once
#include <exception>
#include <string>

namespace tpshard {

/// e.what() of a nlohmann::json exception without its "[json.exception.parse_error.101] " tag:
/// "parse error at line 1, column 14: syntax error while parsing object - unexpected end of input;
/// expected '}'". Any other exception's text is returned as it is.
inline std::string json_error_text(const std::exception& e) {
  std::string text = e.what();
  if (text.rfind("[json.exception.", 0) == 0) {
    const std::size_t end = text.find("] ");
    if (end != std::string::npos) text.erase(0, end + 2);
  }
  return text;
}

}  // namespace tpshard
