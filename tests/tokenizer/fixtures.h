// fixtures.h: paths of the tokenizer fixtures and small readers shared by the test files.
#pragma once
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace tpshard::test {

/// tests/fixtures/tokenizers/REL (this suite's own fixtures).
inline std::string fixture(const std::string& rel) { return std::string(TPSHARD_TOKENIZER_FIXTURES) + "/" + rel; }
/// tests/fixtures/REL (model fixtures other suites own, read here when present).
inline std::string shared_fixture(const std::string& rel) { return std::string(TPSHARD_FIXTURES_ROOT) + "/" + rel; }

inline std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

}  // namespace tpshard::test
