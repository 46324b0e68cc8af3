// fs_util.h: small filesystem helpers of the converter: fsync of files/directories, file copy, and
// the temporary-directory guard that makes the output appear atomically.
#pragma once
#include <string>

namespace tpshard {

/// fsync a file or directory by path; Error naming it on failure.
void fsync_path(const std::string& path);
/// Copy src to dst (dst created, fsynced). Error naming the files on failure.
void copy_file_synced(const std::string& src, const std::string& dst);

/// Creates OUT.tmp-XXXXXX next to OUT with this process's owner record in it (temp_owner.h: the next
/// convert removes the directory if this process dies without cleaning up, e.g. SIGKILL); removes it
/// in the destructor unless commit() succeeded. Registered for SIGINT/SIGTERM cleanup while alive.
class TempDirGuard {
 public:
  explicit TempDirGuard(const std::string& out_dir);
  ~TempDirGuard();
  const std::string& path() const { return tmp_; }
  /// Remove the owner record, fsync, then rename tmp -> out (replacing an existing out when `replace`),
  /// fsync the parent.
  void commit(const std::string& out_dir, bool replace);

 private:
  std::string tmp_;
  bool committed_ = false;
};

/// True once SIGINT or SIGTERM arrived while a TempDirGuard was alive (workers, and the hashing of the
/// source and shard files, poll it). That first signal also restores both signals' default action, so
/// a second one ends the process at once (the next convert removes the OUT.tmp-XXXXXX it leaves).
bool interrupted();
/// The signal that set interrupted() (SIGINT or SIGTERM; the first one), 0 when none did. Still set
/// after the guard is gone, so the tool can exit 128 + signal; reset when the next guard is made.
int interrupt_signal();

}  // namespace tpshard
