// stdout_status.h: the last step of a successful command: flush stdout and turn a failed write (full
// disk, /dev/full, a closed pipe) into an error and exit 1, so lost output never looks like success.
// Used by both executables (tools/tpshard, tools/tprun).
#pragma once
#include <cerrno>
#include <cstdio>
#include <cstring>

namespace tpshard::cli {

/// errno of the first failed flush_stdout() (0: none), for stdout_status's message.
inline int& first_stdout_errno() {
  static int err = 0;
  return err;
}

/// fflush(stdout) for text streamed while a command runs; remembers why the first failed flush failed.
inline void flush_stdout() {
  errno = 0;
  if (std::fflush(stdout) != 0 && first_stdout_errno() == 0) first_stdout_errno() = errno;
}

/// 0 when everything written to stdout reached it; otherwise prints "error: TOOL: writing to standard
/// output failed (REASON)" and a hint on stderr and returns 1. REASON is the errno of this flush, else of
/// the first failed flush_stdout().
inline int stdout_status(const char* tool) {
  errno = 0;
  if (std::fflush(stdout) == 0 && !std::ferror(stdout)) return 0;
  const int err = errno ? errno : first_stdout_errno();
  std::fprintf(stderr,
               "error: %s: writing to standard output failed (%s)\nhint: check the free space where "
               "stdout is redirected, or the reader of the pipe\n",
               tool, err ? std::strerror(err) : "I/O error");
  return 1;
}

}  // namespace tpshard::cli
