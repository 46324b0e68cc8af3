// test_util.h: helpers of the format tests: a scratch directory, a C++ safetensors writer (so the
// tests make their own checkpoints, no Python), random data and running the tpshard binary.
#pragma once
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "format/dtype.h"

namespace tpshard::test {

/// A fresh directory under the system temp dir, removed (recursively) at scope exit.
struct ScratchDir {
  std::filesystem::path path;
  ScratchDir() {
    std::string t = (std::filesystem::temp_directory_path() / "tpshard_test_XXXXXX").string();
    path = ::mkdtemp(t.data());
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::permissions(path, std::filesystem::perms::owner_all, std::filesystem::perm_options::add, ec);
    std::filesystem::remove_all(path, ec);
  }
  std::string operator/(const std::string& s) const { return (path / s).string(); }
};

/// One tensor to write: name, safetensors dtype string, shape, raw little-endian bytes.
struct StEntry {
  std::string dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

/// Write a safetensors file (header JSON padded with spaces to 8 bytes, tensors in name order).
inline void write_safetensors(const std::string& path, const std::map<std::string, StEntry>& tensors) {
  nlohmann::json h = nlohmann::json::object();
  uint64_t off = 0;
  for (const auto& [name, e] : tensors) {
    h[name] = {{"dtype", e.dtype}, {"shape", e.shape}, {"data_offsets", {off, off + e.bytes.size()}}};
    off += e.bytes.size();
  }
  h["__metadata__"] = {{"format", "pt"}};
  std::string hs = h.dump();
  while (hs.size() % 8) hs += ' ';
  std::ofstream f(path, std::ios::binary);
  const uint64_t n = hs.size();
  f.write(reinterpret_cast<const char*>(&n), 8);
  f.write(hs.data(), static_cast<std::streamsize>(hs.size()));
  for (const auto& [name, e] : tensors) f.write(reinterpret_cast<const char*>(e.bytes.data()), static_cast<std::streamsize>(e.bytes.size()));
}

/// Random values in [-1, 1) as `dt` (exactly representable, so a keep-dtype round trip is exact).
inline StEntry random_entry(std::mt19937& rng, DType dt, std::vector<int64_t> shape) {
  int64_t n = 1;
  for (auto d : shape) n *= d;
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  StEntry e;
  e.dtype = dt == DType::F32 ? "F32" : dt == DType::F16 ? "F16" : "BF16";
  e.shape = std::move(shape);
  e.bytes.resize(static_cast<size_t>(n) * dtype_size(dt));
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = u(rng);
  convert_elements(v.data(), DType::F32, e.bytes.data(), dt, v.size(), "random");
  return e;
}

inline void write_text(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

/// Run `tpshard ARGS` (stdout/stderr to `log`); returns the exit status.
/// Runs tpshard ARGS with stdout and stderr in `log`; env: "NAME=VALUE " assignments put before it.
inline int run_tpshard(const std::string& args, const std::string& log, const std::string& env = "") {
  const std::string cmd = env + std::string(TPSHARD_BIN) + " " + args + " >" + log + " 2>&1";
  const int rc = std::system(cmd.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

inline std::string read_text(const std::string& path) {
  std::ifstream f(path);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

/// The entries next to `out` whose names start with out's name + suffix_start (e.g. ".tmp-", ".old-"),
/// symbolic links excluded, sorted.
inline std::vector<std::string> siblings_of(const std::string& out, const std::string& suffix_start) {
  namespace fs = std::filesystem;
  std::vector<std::string> r;
  const std::string prefix = fs::path(out).filename().string() + suffix_start;
  for (const auto& e : fs::directory_iterator(fs::path(out).parent_path()))
    if (e.path().filename().string().rfind(prefix, 0) == 0 && !e.is_symlink()) r.push_back(e.path().string());
  std::sort(r.begin(), r.end());
  return r;
}

/// Starts `bin args...` as a child process (fork + exec) with stdout and stderr in `log`, and returns its
/// pid without waiting (the caller signals and reaps it). The child exits 127 if it cannot start.
inline pid_t spawn_logged(const std::string& bin, const std::vector<std::string>& args, const std::string& log) {
  std::vector<char*> argv{const_cast<char*>(bin.c_str())};
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || ::dup2(fd, 1) < 0 || ::dup2(fd, 2) < 0) ::_exit(127);
    ::execv(bin.c_str(), argv.data());
    ::_exit(127);
  }
  return pid;
}

/// Runs body() in a forked child that then dies by SIGKILL (no destructor, no signal handler runs: a
/// convert killed mid-way). The child dies after body returns, so body's locals are destroyed first; a
/// body that must die while an object lives (e.g. a TempDirGuard) ends with ::kill(::getpid(), SIGKILL). Returns the child's pid once it is reaped; throws std::runtime_error when the
/// child ended any other way.
inline pid_t run_then_sigkill(const std::function<void()>& body) {
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    try {
      body();
      ::kill(::getpid(), SIGKILL);
    } catch (...) {
    }
    ::_exit(3);
  }
  int status = 0;
  if (::waitpid(pid, &status, 0) != pid || !WIFSIGNALED(status) || WTERMSIG(status) != SIGKILL)
    throw std::runtime_error("the child " + std::to_string(pid) + " did not end by SIGKILL");
  return pid;
}

}  // namespace tpshard::test
