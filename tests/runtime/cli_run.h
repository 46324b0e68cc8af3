// cli_run.h: run the real tprun (or tpshard) binary from a test and capture its exit code, stdout and
// stderr (shared by test_cli.cpp, test_cli_ux.cpp, test_cli_preflight.cpp). Needs TPSHARD_BIN_DIR.
#pragma once
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace tpshard::test {

struct CliRun {
  int code;  ///< exit status, -1 when killed by a signal
  std::string out, err;
};

inline std::string slurp_file(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

/// Runs `prefix TOOL args` (TOOL: "tprun" or "tpshard", from TPSHARD_BIN_DIR) through the shell (prefix:
/// e.g. "cd DIR && ", "VAR=value ", a privilege drop); stdout and stderr go through out.txt / err.txt in
/// capture_dir (created).
inline CliRun run_tool(const std::string& tool, const std::string& args, const std::string& capture_dir,
                       const std::string& prefix = "") {
  std::filesystem::create_directories(capture_dir);
  const std::string cmd = prefix + std::string(TPSHARD_BIN_DIR) + "/" + tool + " " + args + " >" + capture_dir +
                          "/out.txt 2>" + capture_dir + "/err.txt";
  const int status = std::system(cmd.c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, slurp_file(capture_dir + "/out.txt"),
          slurp_file(capture_dir + "/err.txt")};
}

inline CliRun run_tprun(const std::string& args, const std::string& capture_dir, const std::string& prefix = "") {
  return run_tool("tprun", args, capture_dir, prefix);
}

}  // namespace tpshard::test
