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
  } catch (const Error& e) {
    const std::string what = e.what();
    // An error in another file the tokenizer reads (config.json, tokenizer_config.json, ...) names that
    // file: keep its own message and hint, which do not blame the tokenizer.
    if (what.find(file) == std::string::npos && what.rfind(dir, 0) == 0) throw;
    throw Error(what.find(file) != std::string::npos ? what : file + ": cannot be loaded as a tokenizer: " + what, hint);
  } catch (const std::exception& e) {
    const std::string what = e.what();
    // Tokenizer::load names the file in most errors; make sure the message always does.
    throw Error(what.find(file) != std::string::npos ? what : file + ": cannot be loaded as a tokenizer: " + what, hint);
  }
}

}  // namespace tpshard::cli
