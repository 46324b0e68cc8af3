// fs_util.cpp: fsync/copy helpers and TempDirGuard (atomic output directory, signal cleanup).
#include "convert/fs_util.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <vector>

#include "convert/temp_owner.h"
#include "format/error.h"

namespace tpshard {

namespace fs = std::filesystem;

namespace {

std::atomic<int> g_interrupt_signal{0};  // 0: none; lock-free int, so the handler may store it
static_assert(std::atomic<int>::is_always_lock_free, "the signal handler needs a lock-free atomic");

/// The first SIGINT/SIGTERM asks the workers to stop at their next chunk (they remove the temporary
/// directory); it also gives both signals back their default action, so a second Ctrl-C ends the
/// process at once. What that leaves (OUT.tmp-XXXXXX with this process's owner record) the next
/// convert to OUT removes (temp_owner.h). Only async-signal-safe calls.
void on_signal(int sig) {
  int none = 0;
  if (!g_interrupt_signal.compare_exchange_strong(none, sig)) return;  // keep the first signal
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  ::sigaction(SIGINT, &dfl, nullptr);
  ::sigaction(SIGTERM, &dfl, nullptr);
  static const char kMsg[] =
      "\ntpshard convert: interrupted: stopping and removing the temporary output (press Ctrl-C again to stop at "
      "once; the next convert to the same -o then removes what is left)\n";
  (void)!::write(STDERR_FILENO, kMsg, sizeof(kMsg) - 1);
}

std::string parent_of(const std::string& p) {
  fs::path parent = fs::path(p).parent_path();
  return parent.empty() ? "." : parent.string();
}

/// Deletes the previous output moved aside to `old` (holding this process's owner record), the owner
/// record last: a SIGKILL halfway leaves a directory the next convert recognizes as stale and removes.
std::error_code remove_moved_aside(const std::string& old) {
  std::error_code ec;
  for (fs::directory_iterator it(old, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->path().filename() == kTempOwnerFile) continue;
    fs::remove_all(it->path(), ec);
    if (ec) return ec;
  }
  if (ec) return ec;
  fs::remove_all(old, ec);
  return ec;
}

}  // namespace

bool interrupted() { return g_interrupt_signal.load() != 0; }
int interrupt_signal() { return g_interrupt_signal.load(); }

void fsync_path(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error(path + ": cannot open for fsync: " + std::strerror(errno), "");
  const int rc = ::fsync(fd);
  const int e = errno;
  ::close(fd);
  if (rc != 0 && e != EINVAL) throw Error(path + ": fsync failed: " + std::strerror(e), "the disk may be full or failing");
}

void copy_file_synced(const std::string& src, const std::string& dst) {
  std::error_code ec;
  fs::copy_file(src, dst, fs::copy_options::overwrite_existing, ec);
  if (ec) throw Error("copying " + src + " to " + dst + " failed: " + ec.message(), "check free space and permissions");
  fsync_path(dst);
}

TempDirGuard::TempDirGuard(const std::string& out_dir) {
  std::string tmpl = out_dir;
  while (tmpl.size() > 1 && tmpl.back() == '/') tmpl.pop_back();
  tmpl += ".tmp-XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  if (!::mkdtemp(buf.data()))
    throw Error(out_dir + ": cannot create the temporary directory " + tmpl + ": " + std::strerror(errno),
                "check that " + parent_of(out_dir) + " exists and is writable, or choose another -o");
  tmp_ = buf.data();
  // mkdtemp makes the directory 0700; once renamed into place it is the model directory, which other
  // users (a shared model store, a service account) must be able to read: give it the mode a plain
  // mkdir would have (0777 minus the umask).
  const mode_t mask = ::umask(0);
  ::umask(mask);
  ::chmod(tmp_.c_str(), 0777 & ~mask);
  // Who made it, so that the next convert to OUT can remove it if this process is SIGKILLed.
  try {
    write_temp_owner(tmp_, this_process_owner());
  } catch (...) {
    std::error_code ec;
    fs::remove_all(tmp_, ec);
    throw;
  }
  g_interrupt_signal.store(0);
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
}

TempDirGuard::~TempDirGuard() {
  if (!committed_) {
    std::error_code ec;
    fs::remove_all(tmp_, ec);
  }
  std::signal(SIGINT, SIG_DFL);
  std::signal(SIGTERM, SIG_DFL);
}

void TempDirGuard::commit(const std::string& out_dir, bool replace) {
  std::error_code rec;
  fs::remove(fs::path(tmp_) / kTempOwnerFile, rec);  // the owner record is not part of the model directory
  if (rec)
    throw Error(tmp_ + "/" + kTempOwnerFile + ": cannot remove the owner record: " + rec.message(),
                "check permissions of " + tmp_);
  for (const auto& e : fs::recursive_directory_iterator(tmp_))
    if (e.is_directory()) fsync_path(e.path().string());
  fsync_path(tmp_);
  std::error_code ec;
  std::string old;
  if (replace && fs::exists(out_dir, ec)) {
    old = out_dir;
    while (old.size() > 1 && old.back() == '/') old.pop_back();
    old += ".old-" + std::to_string(::getpid());
    if (std::rename(out_dir.c_str(), old.c_str()) != 0)
      throw Error(out_dir + ": cannot move the existing output aside: " + std::strerror(errno), "remove it yourself and retry");
    // Owner record: if this process dies before OLD is deleted, the next convert to OUT deletes it.
    try {
      write_temp_owner(old, this_process_owner());
    } catch (const Error& w) {
      std::fprintf(stderr, "tpshard convert: warning: %s (a later convert cannot tell %s is stale)\n", w.what(),
                   old.c_str());
    }
  }
  if (std::rename(tmp_.c_str(), out_dir.c_str()) != 0) {
    const int e = errno;
    if (!old.empty() && std::rename(old.c_str(), out_dir.c_str()) == 0)
      fs::remove(fs::path(out_dir) / kTempOwnerFile, ec);
    if (e == ENOTEMPTY || e == EEXIST)  // check_out_dir (or the move aside) found no OUT: someone made it since
      throw Error(out_dir + ": another process created " + out_dir + " during this convert (rename of " + tmp_ +
                      " into place: " + std::strerror(e) + "); it is kept and this convert's output is discarded",
                  "check what wrote " + out_dir + " (another tpshard convert to the same -o?), then rerun with --force "
                  "to replace it or with another -o");
    throw Error(out_dir + ": cannot rename " + tmp_ + " into place: " + std::strerror(e), "check permissions of " + parent_of(out_dir));
  }
  committed_ = true;
  fsync_path(parent_of(out_dir));
  if (!old.empty()) {
    ec = remove_moved_aside(old);
    if (ec)
      std::fprintf(stderr,
                   "tpshard convert: warning: the previous %s was moved aside to %s and cannot be removed: %s; "
                   "remove it yourself (the next convert to %s tries again)\n",
                   out_dir.c_str(), old.c_str(), ec.message().c_str(), out_dir.c_str());
  }
}

}  // namespace tpshard
