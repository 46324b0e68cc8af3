// version_text.h: what `tpshard --version` and `tprun --version` print: the tool version, the git commit
// of the build (captured when CMake configured the tree: tools/CMakeLists.txt) and, for tprun, the
// backends built in.
#pragma once
#include <string>

#include "model/manifest.h"

#ifndef TPSHARD_GIT_COMMIT
#define TPSHARD_GIT_COMMIT "unknown"
#endif

namespace tpshard {

/// "0.1.0 (commit 0123456789ab)" followed by `backends` on a new line when given.
inline std::string version_text(const std::string& backends = {}) {
  std::string v = std::string(tool_version()) + " (commit " TPSHARD_GIT_COMMIT ")";
  if (!backends.empty()) v += "\n" + backends;
  return v;
}

}  // namespace tpshard
