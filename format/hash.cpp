// hash.cpp: XXH3-64 helpers over libxxhash (buffers, streams, file ranges) and their hex spelling.
#include "format/hash.h"

#include <fcntl.h>
#include <unistd.h>
#include <xxhash.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include "format/error.h"

namespace tpshard {

uint64_t xxh3_64(const void* data, size_t n) { return XXH3_64bits(data, n); }

struct Xxh3Stream::State {
  XXH3_state_t* st = nullptr;
};

Xxh3Stream::Xxh3Stream() : s_(std::make_unique<State>()) {
  s_->st = XXH3_createState();
  if (!s_->st) throw Error("XXH3_createState failed: out of memory", "");
  XXH3_64bits_reset(s_->st);
}
Xxh3Stream::~Xxh3Stream() {
  if (s_ && s_->st) XXH3_freeState(s_->st);
}
Xxh3Stream::Xxh3Stream(Xxh3Stream&&) noexcept = default;
Xxh3Stream& Xxh3Stream::operator=(Xxh3Stream&& o) noexcept {
  if (this != &o) {
    if (s_ && s_->st) XXH3_freeState(s_->st);
    s_ = std::move(o.s_);
  }
  return *this;
}
void Xxh3Stream::update(const void* data, size_t n) { XXH3_64bits_update(s_->st, data, n); }
uint64_t Xxh3Stream::digest() const { return XXH3_64bits_digest(s_->st); }

uint64_t xxh3_fd_range(int fd, uint64_t offset, uint64_t length, const std::string& path, bool drop_cache,
                       uint64_t* bytes_done, const std::function<void()>& after_chunk) {
  constexpr size_t kChunk = 8u << 20;
  std::vector<uint8_t> buf(length < kChunk ? static_cast<size_t>(length) : kChunk);
  Xxh3Stream h;
  uint64_t done = 0;
  while (done < length) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(kChunk, length - done));
    const ssize_t got = ::pread(fd, buf.data(), want, static_cast<off_t>(offset + done));
    if (got < 0) {
      if (errno == EINTR) continue;
      throw Error(path + ": read failed at offset " + std::to_string(offset + done) + ": " + std::strerror(errno),
                  "check the disk and file permissions");
    }
    if (got == 0) {
      throw Error(path + ": file ends at offset " + std::to_string(offset + done) + ", expected " +
                      std::to_string(offset + length) + " bytes",
                  "the file is truncated; copy or convert it again");
    }
    h.update(buf.data(), static_cast<size_t>(got));
    done += static_cast<uint64_t>(got);
    if (bytes_done) *bytes_done += static_cast<uint64_t>(got);
    if (after_chunk) after_chunk();
  }
  if (drop_cache && length > 0) ::posix_fadvise(fd, static_cast<off_t>(offset), static_cast<off_t>(length), POSIX_FADV_DONTNEED);
  return h.digest();
}

uint64_t xxh3_file(const std::string& path, uint64_t* bytes_done, const std::function<void()>& after_chunk) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error(path + ": cannot open: " + std::strerror(errno), "check that the file exists and is readable");
  const off_t size = ::lseek(fd, 0, SEEK_END);
  if (size < 0) {
    ::close(fd);
    throw Error(path + ": cannot get the file size: " + std::strerror(errno), "");
  }
  try {
    const uint64_t h = xxh3_fd_range(fd, 0, static_cast<uint64_t>(size), path, true, bytes_done, after_chunk);
    ::close(fd);
    return h;
  } catch (...) {
    ::close(fd);
    throw;
  }
}

std::string hash_to_hex(uint64_t h) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

uint64_t hash_from_hex(const std::string& s, const std::string& what) {
  if (s.size() != 16) throw Error(what + ": hash '" + s + "' is not 16 hex digits", "the manifest is corrupt; re-run tpshard convert");
  uint64_t v = 0;
  for (char c : s) {
    int d;
    if (c >= '0' && c <= '9') d = c - '0';
    else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
    else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
    else throw Error(what + ": hash '" + s + "' is not 16 hex digits", "the manifest is corrupt; re-run tpshard convert");
    v = (v << 4) | static_cast<uint64_t>(d);
  }
  return v;
}

}  // namespace tpshard
