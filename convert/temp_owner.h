// temp_owner.h: who created an OUT.tmp-XXXXXX directory of `tpshard convert`, and the removal of those
// whose creator is gone. TempDirGuard (fs_util.h) writes the owner record into every temporary
// directory it makes; a SIGKILLed convert cannot clean up, so the next convert to the same OUT calls
// remove_stale_temp_dirs first. Does not own: creating or committing the temporary directory.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace tpshard {

/// File name of the owner record inside OUT.tmp-XXXXXX (removed before the directory becomes OUT).
inline constexpr const char* kTempOwnerFile = ".tpshard-convert-owner";

/// The process that created a temporary directory. A pid alone can be reused after the process dies,
/// so the record also holds the process's start time and the boot it ran in (Linux /proc; empty or 0
/// when unknown, and then only the pid is compared), and where the pid means something: the host and
/// the pid namespace (a shared filesystem is seen by other machines and containers).
struct TempDirOwner {
  int64_t pid = 0;
  uint64_t start_ticks = 0;  ///< field 22 of /proc/PID/stat: clock ticks after boot; 0 = unknown
  std::string boot_id;       ///< /proc/sys/kernel/random/boot_id; empty = unknown
  std::string host;          ///< gethostname(); empty = unknown
  std::string pid_ns;        ///< the link /proc/self/ns/pid ("pid:[4026531836]"); empty = unknown
};

/// This process as an owner record.
TempDirOwner this_process_owner();

/// Writes `owner` to DIR/kTempOwnerFile (one line: "tpshard-convert-owner v1 PID START BOOT_ID HOST
/// PID_NS", "-" for an unknown text field). Error naming the file on failure.
void write_temp_owner(const std::string& dir, const TempDirOwner& owner);

/// The record in DIR/kTempOwnerFile, or nullopt when it is missing or not in the format above.
std::optional<TempDirOwner> read_temp_owner(const std::string& dir);

/// What became of one OUT.tmp-XXXXXX directory found next to OUT.
struct StaleTempDir {
  std::string path;
  bool removed = false;  ///< true: its creator was gone and it was deleted
  std::string why;       ///< for the notice: "process 123 on this host is no longer running", ...
};

/// Looks at the directories named exactly OUT.tmp-XXXXXX (X: the 6 characters mkdtemp fills in) or
/// OUT.old-PID (the previous output that `convert --force` moved aside; it gets the same owner record)
/// next to OUT and deletes those whose owner record names a process of this host and pid namespace that is
/// no longer running (pid gone or a zombie, or reused: another start time or boot). Keeps, and reports,
/// those whose creator still runs, those made on another host or container and those without a
/// readable record (an older tpshard, another
/// program, or a convert that has just created it): only a person can tell whether they are in use.
/// Symbolic links are never followed or removed. Never throws for a directory it cannot delete (it is
/// reported as kept, with the reason). Returns one entry per directory found, in name order.
std::vector<StaleTempDir> remove_stale_temp_dirs(const std::string& out_dir);

}  // namespace tpshard
