// error.h: the one exception type of the project, and check macros.
// Owns: tpshard::Error (message + optional hint). Does not own: CUDA/NCCL checks (runtime/cuda/check.cuh).
#pragma once
#include <stdexcept>
#include <string>

namespace tpshard {

/// A user-facing failure. what() is one line naming the file (or object) and the problem;
/// hint() says what to do about it (may be empty). Tools print "error: <what>\nhint: <hint>" and exit 1.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what, std::string hint = {})
      : std::runtime_error(what), hint_(std::move(hint)) {}
  const std::string& hint() const { return hint_; }

 private:
  std::string hint_;
};

}  // namespace tpshard

/// TPS_CHECK(cond, what, hint): throw tpshard::Error(what, hint) when cond is false.
#define TPS_CHECK(cond, what, hint)                         \
  do {                                                      \
    if (!(cond)) throw ::tpshard::Error((what), (hint));    \
  } while (0)
