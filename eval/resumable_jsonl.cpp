// resumable_jsonl.cpp: crash-safe JSONL results (POSIX open/write/fsync/rename).
#include "eval/resumable_jsonl.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <exception>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <unordered_map>

#include "format/error.h"
#include "format/json_depth.h"

namespace tpshard::eval {
namespace {

std::string errno_text() { return std::strerror(errno); }

void write_all(int fd, const std::string& data, const std::string& path) {
  size_t off = 0;
  while (off < data.size()) {
    ssize_t n = ::write(fd, data.data() + off, data.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw Error(path + ": write failed: " + errno_text(), "check free disk space and permissions");
    off += static_cast<size_t>(n);
  }
}

}  // namespace

std::string id_key(const nlohmann::json& id) {
  return id.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

JsonlContents read_jsonl_results(const std::string& path) {
  JsonlContents c;
  std::ifstream f(path, std::ios::binary);
  if (!f) return c;
  std::ostringstream ss;
  ss << f.rdbuf();
  const std::string text = ss.str();
  size_t last_nl = text.rfind('\n');
  c.complete_bytes = last_nl == std::string::npos ? 0 : last_nl + 1;
  c.torn_bytes = text.size() - c.complete_bytes;
  size_t pos = 0, line_no = 0;
  while (pos < c.complete_bytes) {
    size_t nl = text.find('\n', pos);
    std::string line = text.substr(pos, nl - pos);
    pos = nl + 1;
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::json j = nlohmann::json::parse(line, json_depth_guard(path + ":" + std::to_string(line_no)), false);
    if (j.is_discarded() || !j.is_object() || !j.contains("id"))
      throw Error(path + ":" + std::to_string(line_no) + ": not a results line (a JSON object with \"id\")",
                  "this output file was not written by tprun or was edited; fix the line or choose another --output");
    c.keys.push_back(id_key(j["id"]));
    c.lines.push_back(std::move(line));
  }
  return c;
}

ResumableJsonlWriter::ResumableJsonlWriter(const std::string& path) : path_(path) {
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0644);
  if (fd_ >= 0) created_ = true;
  else if (errno == EEXIST) fd_ = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
  if (fd_ < 0) throw Error(path + ": cannot open for appending: " + errno_text(), "check the directory exists and is writable");
  try {
    if (::flock(fd_, LOCK_EX | LOCK_NB) != 0)
      throw Error(path + ": another job is writing this file", "wait for it to finish or stop it, then rerun to resume");
    const JsonlContents existing = read_jsonl_results(path);  // read under the lock: nobody else appends
    if (existing.torn_bytes > 0) {
      if (::ftruncate(fd_, static_cast<off_t>(existing.complete_bytes)) != 0)
        throw Error(path + ": cannot cut the torn last line: " + errno_text(), "remove the last line by hand");
      ::fsync(fd_);
      truncated_bytes_ = existing.torn_bytes;
    }
  } catch (...) {
    ::close(fd_);
    fd_ = -1;
    throw;
  }
}

ResumableJsonlWriter::~ResumableJsonlWriter() {
  if (fd_ < 0) return;
  if (created_ && !appended_ && std::uncaught_exceptions() > 0) ::unlink(path_.c_str());  // still locked: ours
  if (dirty_) ::fsync(fd_);
  ::close(fd_);
}

void ResumableJsonlWriter::append(const std::vector<std::string>& lines) {
  if (lines.empty()) return;
  std::string data;
  for (const auto& l : lines) {
    data += l;
    data += '\n';
  }
  appended_ = true;
  write_all(fd_, data, path_);
  dirty_ = true;
  sync_if_due();
}

void ResumableJsonlWriter::sync_if_due() {
  if (!dirty_) return;
  const auto now = std::chrono::steady_clock::now();
  // Written after the last sync, so unsynced for at most kSyncInterval when this runs after every step.
  if (std::chrono::duration<double>(now - synced_at_).count() < kSyncInterval) return;
  if (::fsync(fd_) != 0) throw Error(path_ + ": fsync failed: " + errno_text(), "check the file system");
  dirty_ = false;
  synced_at_ = now;
}

void rewrite_jsonl_in_order(const std::string& path, const std::vector<std::string>& key_order) {
  JsonlContents c = read_jsonl_results(path);
  std::unordered_map<std::string, size_t> rank;
  for (size_t i = 0; i < key_order.size(); ++i) rank.emplace(key_order[i], i);
  std::vector<const std::string*> ordered(key_order.size(), nullptr);
  std::vector<const std::string*> rest;
  for (size_t i = 0; i < c.lines.size(); ++i) {
    auto it = rank.find(c.keys[i]);
    if (it != rank.end() && ordered[it->second] == nullptr)
      ordered[it->second] = &c.lines[i];
    else
      rest.push_back(&c.lines[i]);
  }
  std::string data;
  for (const auto* l : ordered)
    if (l != nullptr) data += *l + "\n";
  for (const auto* l : rest) data += *l + "\n";

  const std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw Error(tmp + ": cannot create: " + errno_text(), "check the directory is writable");
  try {
    write_all(fd, data, tmp);
    if (::fsync(fd) != 0) throw Error(tmp + ": fsync failed: " + errno_text(), "check the file system");
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    throw Error(path + ": cannot replace with " + tmp + ": " + errno_text(), "the results are complete in " + tmp);
}

}  // namespace tpshard::eval
