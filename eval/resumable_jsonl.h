// resumable_jsonl.h: an append-only JSONL results file that survives being killed.
// Owns: reading the ids already done, cutting a torn last line, appending a batch of lines durably
// (one write per batch, fsync at most once a second and at the end), and the final rewrite in input order. Does not own: what a line holds.
#pragma once
#include <chrono>
#include <cstddef>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace tpshard::eval {

/// The canonical key of a record id: its compact JSON text ("\"q1\"", "7"), so 7 and "7" differ.
std::string id_key(const nlohmann::json& id);

/// The complete lines of an existing JSONL results file.
struct JsonlContents {
  std::vector<std::string> lines;  ///< complete lines ('\n'-terminated in the file), without the '\n'
  std::vector<std::string> keys;   ///< id_key of each line's "id"
  size_t complete_bytes = 0;       ///< bytes up to and including the last '\n'
  size_t torn_bytes = 0;           ///< bytes after the last '\n' (a line cut by a kill)
};

/// Read PATH (a missing file reads as empty). Blank lines are ignored. Throws Error naming FILE:LINE
/// when a complete line is not a JSON object with an "id" (the file was not written by us, or edited).
JsonlContents read_jsonl_results(const std::string& path);

/// A results file opened for appending. Only the writer rank constructs one (SPMD: tp_rank 0).
class ResumableJsonlWriter {
 public:
  /// Opens (creates) PATH and takes an exclusive flock on it (released on destruction); when it ends in
  /// a torn line, truncates it to the last '\n' and sets truncated_bytes(). Throws Error naming the file
  /// when it cannot be opened or another process holds the lock (two jobs on one output).
  /// A file this writer created is removed again if the job fails (the writer is destroyed during
  /// exception unwinding) before anything was appended, so a refused job leaves no empty output behind.
  explicit ResumableJsonlWriter(const std::string& path);
  ~ResumableJsonlWriter();
  ResumableJsonlWriter(const ResumableJsonlWriter&) = delete;
  ResumableJsonlWriter& operator=(const ResumableJsonlWriter&) = delete;

  /// Append lines (each without '\n') with one write() of the joined text, so a killed process leaves
  /// either the whole batch or a torn tail that the next open cuts (written bytes outlive the process).
  /// fsync (against a host crash) runs at most once per kSyncInterval and when the writer is closed:
  /// a batch of a few milliseconds does not wait for the disk each time.
  void append(const std::vector<std::string>& lines);
  /// fsync when lines written more than kSyncInterval ago are not synced yet (call it after every step,
  /// so lines do not wait unsynced while no request finishes). Throws Error naming the file on failure.
  void sync_if_due();
  /// Longest time appended lines stay without fsync while the job runs (seconds).
  static constexpr double kSyncInterval = 1.0;
  size_t truncated_bytes() const { return truncated_bytes_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
  size_t truncated_bytes_ = 0;
  bool created_ = false;   ///< the file did not exist before this writer opened it
  bool appended_ = false;  ///< append() wrote something
  bool dirty_ = false;     ///< written since the last fsync
  std::chrono::steady_clock::time_point synced_at_ = std::chrono::steady_clock::now();
};

/// Rewrite PATH so that lines appear in the order of `key_order` (keys not in key_order keep their
/// relative order after the others). Writes PATH.tmp, fsyncs, renames over PATH: never half-written.
void rewrite_jsonl_in_order(const std::string& path, const std::vector<std::string>& key_order);

}  // namespace tpshard::eval
