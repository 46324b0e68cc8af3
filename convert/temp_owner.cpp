// temp_owner.cpp: the owner record of OUT.tmp-XXXXXX directories and the removal of stale ones
// (see temp_owner.h). Liveness is Linux's: kill(pid, 0) plus /proc/PID/stat (state, start time).
#include "convert/temp_owner.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "format/error.h"

namespace tpshard {

namespace fs = std::filesystem;

namespace {

constexpr const char* kRecordTag = "tpshard-convert-owner";
constexpr const char* kRecordVersion = "v1";

/// State letter and start time (field 3 and 22 of /proc/PID/stat), or false when unreadable.
bool read_proc_stat(int64_t pid, char* state, uint64_t* start_ticks) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!f || !std::getline(f, line)) return false;
  // "PID (COMM) STATE PPID ...": COMM may hold spaces and parentheses, so fields start after the last ')'.
  const size_t close = line.rfind(')');
  if (close == std::string::npos) return false;
  std::istringstream rest(line.substr(close + 1));
  std::string field;
  for (int index = 3; rest >> field; ++index) {
    if (index == 3) *state = field.empty() ? '?' : field[0];
    if (index == 22) {
      *start_ticks = std::strtoull(field.c_str(), nullptr, 10);
      return true;
    }
  }
  return false;
}

std::string read_boot_id() {
  std::ifstream f("/proc/sys/kernel/random/boot_id");
  std::string id;
  if (!f || !(f >> id)) return {};
  return id;
}

std::string pid_namespace() {
  char buf[128] = {0};
  const ssize_t n = ::readlink("/proc/self/ns/pid", buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

std::string host_name() {
  char buf[256] = {0};
  if (::gethostname(buf, sizeof(buf) - 1) != 0) return {};
  return buf;
}

/// True while the process of `owner` (assumed to be of this host) still runs: same boot, the pid
/// exists and is not a zombie, and, when both are known, it started at the recorded time.
bool owner_running(const TempDirOwner& owner, const std::string& this_boot_id) {
  if (!owner.boot_id.empty() && !this_boot_id.empty() && owner.boot_id != this_boot_id) return false;
  if (::kill(static_cast<pid_t>(owner.pid), 0) != 0 && errno == ESRCH) return false;  // EPERM: exists
  char state = '?';
  uint64_t start = 0;
  if (!read_proc_stat(owner.pid, &state, &start)) return true;  // no /proc: the pid exists, assume it is ours
  if (state == 'Z' || state == 'X') return false;               // killed, not reaped yet
  return owner.start_ticks == 0 || start == owner.start_ticks;  // otherwise the pid was reused
}

bool is_mkdtemp_suffix(const std::string& s) {
  return s.size() == 6 && std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isalnum(c) != 0; });
}

}  // namespace

TempDirOwner this_process_owner() {
  TempDirOwner o;
  o.pid = static_cast<int64_t>(::getpid());
  char state = '?';
  read_proc_stat(o.pid, &state, &o.start_ticks);
  o.boot_id = read_boot_id();
  o.host = host_name();
  o.pid_ns = pid_namespace();
  return o;
}

void write_temp_owner(const std::string& dir, const TempDirOwner& owner) {
  const std::string path = (fs::path(dir) / kTempOwnerFile).string();
  const auto text = [](const std::string& s) { return s.empty() ? std::string("-") : s; };
  const std::string line = std::string(kRecordTag) + " " + kRecordVersion + " " + std::to_string(owner.pid) + " " +
                           std::to_string(owner.start_ticks) + " " + text(owner.boot_id) + " " + text(owner.host) +
                           " " + text(owner.pid_ns) + "\n";
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  TPS_CHECK(fd >= 0, path + ": cannot create the convert's owner record: " + std::strerror(errno),
            "check that the directory of -o is writable");
  const ssize_t n = ::write(fd, line.data(), line.size());
  const int err = errno;
  ::close(fd);
  TPS_CHECK(n == static_cast<ssize_t>(line.size()),
            path + ": cannot write the convert's owner record: " + (n < 0 ? std::strerror(err) : "short write"),
            "check free space on the filesystem of -o");
}

std::optional<TempDirOwner> read_temp_owner(const std::string& dir) {
  std::ifstream f(fs::path(dir) / kTempOwnerFile);
  std::string tag, version, pid, start, boot, host, ns, extra;
  if (!f || !(f >> tag >> version >> pid >> start >> boot >> host >> ns) || (f >> extra)) return std::nullopt;
  if (tag != kRecordTag || version != kRecordVersion) return std::nullopt;
  const auto digits = [](const std::string& s) {
    const auto digit = [](unsigned char c) { return std::isdigit(c) != 0; };
    return !s.empty() && s.size() <= 19 && std::all_of(s.begin(), s.end(), digit);
  };
  if (!digits(pid) || !digits(start)) return std::nullopt;
  TempDirOwner o;
  o.pid = std::stoll(pid);
  if (o.pid <= 0 || o.pid > INT_MAX) return std::nullopt;
  o.start_ticks = std::stoull(start);
  o.boot_id = boot == "-" ? std::string() : boot;
  o.host = host == "-" ? std::string() : host;
  o.pid_ns = ns == "-" ? std::string() : ns;
  return o;
}

std::vector<StaleTempDir> remove_stale_temp_dirs(const std::string& out_dir) {
  std::string out = out_dir;
  while (out.size() > 1 && out.back() == '/') out.pop_back();
  const fs::path out_path(out);
  const fs::path parent = out_path.parent_path().empty() ? fs::path(".") : out_path.parent_path();
  const std::string prefix = out_path.filename().string() + ".tmp-";
  const std::string old_prefix = out_path.filename().string() + ".old-";  // TempDirGuard::commit's OUT.old-PID
  const auto is_pid = [](const std::string& s) {
    const auto digit = [](unsigned char c) { return std::isdigit(c) != 0; };
    return !s.empty() && s.size() <= 10 && std::all_of(s.begin(), s.end(), digit);
  };

  std::vector<std::string> found;
  std::error_code ec;
  for (fs::directory_iterator it(parent, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    const bool tmp = name.compare(0, prefix.size(), prefix) == 0 && is_mkdtemp_suffix(name.substr(prefix.size()));
    const bool old = name.compare(0, old_prefix.size(), old_prefix) == 0 && is_pid(name.substr(old_prefix.size()));
    if (!tmp && !old) continue;
    std::error_code sec;
    if (fs::is_directory(it->symlink_status(sec)) && !sec)
      found.push_back(out_path.parent_path().empty() ? name : (parent / name).string());
  }
  std::sort(found.begin(), found.end());

  const TempDirOwner self = this_process_owner();
  std::vector<StaleTempDir> result;
  for (const std::string& path : found) {
    StaleTempDir d{path, false, {}};
    const std::optional<TempDirOwner> owner = read_temp_owner(path);
    const std::string who = owner ? "process " + std::to_string(owner->pid) : std::string();
    if (!owner) {
      d.why = "it has no owner record (made by an older tpshard or another program, or by a convert that is just "
              "starting); remove it yourself if no tpshard convert to this -o is running";
    } else if (owner->host != self.host) {
      d.why = "it was made by " + who + " on host " + (owner->host.empty() ? "?" : owner->host) +
              "; remove it yourself once no tpshard convert runs there";
    } else if (!owner->pid_ns.empty() && !self.pid_ns.empty() && owner->pid_ns != self.pid_ns) {
      d.why = "it was made by " + who + " of another container (pid namespace " + owner->pid_ns +
              "); remove it yourself once no tpshard convert runs there";
    } else if (owner_running(*owner, self.boot_id)) {
      d.why = who + ", which writes it, is still running (another tpshard convert to the same -o?)";
    } else {
      std::error_code rec;
      fs::remove_all(path, rec);
      d.removed = !rec;
      d.why = d.removed ? "left by " + who + ", which is no longer running (a killed convert)"
                        : who + " is gone, but it cannot be removed: " + rec.message() + "; remove it yourself";
    }
    result.push_back(std::move(d));
  }
  return result;
}

}  // namespace tpshard
