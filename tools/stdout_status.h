// stdout_status.h: the last step of a successful command: flush stdout and turn a failed write (full
// disk, /dev/full, a closed pipe) into an error and exit 1, so lost output never looks like success.
// Used by both executables (tools/tpshard, tools/tprun).
#pragma once
#include <cerrno>
#include <cstdio>
#include <cstring>

namespace tpshard::cli {

/// 0 when everything written to stdout reached it; otherwise prints "error: TOOL: writing to standard
/// output failed (REASON)" and a hint on stderr and returns 1.
inline int stdout_status(const char* tool) {
  errno = 0;
  if (std::fflush(stdout) == 0 && !std::ferror(stdout)) return 0;
  std::fprintf(stderr, "error: %s: writing to standard output failed (%s)\nhint: check the free space where "
                       "stdout is redirected, or the reader of the pipe\n",
               tool, errno ? std::strerror(errno) : "I/O error");
  return 1;
}

}  // namespace tpshard::cli
