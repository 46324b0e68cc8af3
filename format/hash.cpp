// hash.cpp: XXH3-64 helpers (buffers, streams, file ranges) and their hex spelling; the widest XXH3 this
// CPU runs (format/xxh3_simd.h), else libxxhash's.
#include "format/hash.h"

#include <fcntl.h>
#include <unistd.h>
#include <xxhash.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include "format/error.h"
#include "format/xxh3_simd.h"

namespace tpshard {

namespace {

// The library's own (baseline x86-64 build: SSE2) as an Impl.
uint64_t lib_oneshot(const void* data, size_t n) { return XXH3_64bits(data, n); }
void* lib_create() {
  XXH3_state_t* s = XXH3_createState();
  if (s) XXH3_64bits_reset(s);
  return s;
}
void lib_destroy(void* s) { XXH3_freeState(static_cast<XXH3_state_t*>(s)); }
void lib_reset(void* s) { XXH3_64bits_reset(static_cast<XXH3_state_t*>(s)); }
void lib_update(void* s, const void* data, size_t n) { XXH3_64bits_update(static_cast<XXH3_state_t*>(s), data, n); }
uint64_t lib_digest(const void* s) { return XXH3_64bits_digest(static_cast<const XXH3_state_t*>(s)); }
const xxh3::Impl kLibImpl{"sse2", lib_oneshot, lib_create, lib_destroy, lib_reset, lib_update, lib_digest};

/// The implementation of that name when this CPU runs it, else nullptr.
const xxh3::Impl* impl_named(const std::string& name) {
  if (name == "sse2") return &kLibImpl;
#if defined(TPSHARD_XXH3_SIMD)
  if (name == "avx2" && __builtin_cpu_supports("avx2")) return &xxh3::avx2_impl();
  if (name == "avx512" && __builtin_cpu_supports("avx512f")) return &xxh3::avx512_impl();
#endif
  return nullptr;
}

const xxh3::Impl* widest() {
  for (const char* name : {"avx512", "avx2"})
    if (const xxh3::Impl* i = impl_named(name)) return i;
  return &kLibImpl;
}

std::atomic<const xxh3::Impl*>& current() {
  static std::atomic<const xxh3::Impl*> impl{widest()};
  return impl;
}

}  // namespace

const char* xxh3_implementation() { return current().load()->name; }

void set_xxh3_implementation(const std::string& name) {
  const xxh3::Impl* i = name == "auto" ? widest() : impl_named(name);
  if (!i)
    throw Error("XXH3 implementation '" + name + "' is not available on this CPU or build",
                "use auto, sse2" + std::string(impl_named("avx2") ? ", avx2" : "") +
                    (impl_named("avx512") ? ", avx512" : ""));
  current().store(i);
}

uint64_t xxh3_64(const void* data, size_t n) { return current().load()->oneshot(data, n); }

struct Xxh3Stream::State {
  const xxh3::Impl* impl = nullptr;
  void* st = nullptr;
};

Xxh3Stream::Xxh3Stream() : s_(std::make_unique<State>()) {
  s_->impl = current().load();
  s_->st = s_->impl->create();
  if (!s_->st) throw Error("XXH3_createState failed: out of memory", "free host memory");
}
Xxh3Stream::~Xxh3Stream() {
  if (s_ && s_->st) s_->impl->destroy(s_->st);
}
Xxh3Stream::Xxh3Stream(Xxh3Stream&&) noexcept = default;
Xxh3Stream& Xxh3Stream::operator=(Xxh3Stream&& o) noexcept {
  if (this != &o) {
    if (s_ && s_->st) s_->impl->destroy(s_->st);
    s_ = std::move(o.s_);
  }
  return *this;
}
void Xxh3Stream::reset() { s_->impl->reset(s_->st); }
void Xxh3Stream::update(const void* data, size_t n) { s_->impl->update(s_->st, data, n); }
uint64_t Xxh3Stream::digest() const { return s_->impl->digest(s_->st); }

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
