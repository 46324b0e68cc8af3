// check_tokenizer.cpp: load a directory's tokenizer to validate it (see check_tokenizer.h).
#include "tools/tpshard/check_tokenizer.h"

#include <filesystem>

#include "format/error.h"
#include "tokenizer/tokenizer.h"

namespace tpshard::cli {

void check_tokenizer_loads(const std::string& dir, const std::string& hint) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const bool json = fs::is_regular_file(fs::path(dir) / "tokenizer.json", ec);
  const bool spm = fs::is_regular_file(fs::path(dir) / "tokenizer.model", ec);
  if (!json && !spm) return;
  const std::string file = (fs::path(dir) / (json ? "tokenizer.json" : "tokenizer.model")).string();
  try {
    Tokenizer::load(dir);
  } catch (const std::exception& e) {
    const std::string what = e.what();
    // Tokenizer::load names the file in most errors; make sure the message always does.
    throw Error(what.find(file) != std::string::npos ? what : file + ": cannot be loaded as a tokenizer: " + what, hint);
  }
}

}  // namespace tpshard::cli
