// chunk_reader.cpp: the pread and io_uring readers of chunk_reader.h.
#include "runtime/load/chunk_reader.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <unordered_map>

#include "format/error.h"

#if TPSHARD_HAVE_URING
#include <liburing.h>
#endif

namespace tpshard::load {
namespace {

using Clock = std::chrono::steady_clock;
int64_t ns_since(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t).count();
}

/// Buffered reads with the hash check: each chunk is read and hashed in pieces of this size, so the hash
/// reads bytes still in the core's L2 cache rather than the whole chunk back from memory.
constexpr size_t kHashPiece = size_t(1) << 20;

[[noreturn]] void throw_read_error(const std::string& path, uint64_t pos, int err, bool direct) {
  throw Error(
      path + ": read failed at offset " + std::to_string(pos) + ": " + strerror(err),
      direct ? "retry without --direct-io (the file system may not support O_DIRECT)" : "check the disk");
}

[[noreturn]] void throw_truncated(const std::string& path, uint64_t pos) {
  throw Error(path + ": file is truncated (short read at offset " + std::to_string(pos) + ")",
              "the shard file is incomplete; re-copy it or re-run tpshard convert");
}

/// The widened [start, end) of a request (pages when direct).
void span(const ReadRequest& r, bool direct, uint64_t* start, uint64_t* end) {
  *start = direct ? (r.offset & ~(kPage - 1)) : r.offset;
  *end = direct ? ((r.offset + r.length + kPage - 1) & ~(kPage - 1)) : r.offset + r.length;
}

void check_capacity(uint64_t bytes, size_t cap, const std::string& path) {
  if (bytes > cap)
    throw Error(path + ": internal read of " + std::to_string(bytes) + " bytes exceeds the staging buffer",
                "this is a bug in the loader");
}

/// pread, one request at a time: submit() remembers it, complete() reads (and hashes).
class PreadReader final : public ChunkReader {
 public:
  PreadReader(int fd, bool direct, std::string path) : fd_(fd), direct_(direct), path_(std::move(path)) {}
  int depth() const override { return 1; }
  void submit(size_t slot, const ReadRequest& req) override {
    slot_ = slot;
    req_ = req;
  }
  const uint8_t* complete(size_t, Xxh3Stream* hash, LoadTimers& timers) override {
    if (direct_ || !hash) {
      auto t0 = Clock::now();
      const uint8_t* src =
          read_range(fd_, direct_, req_.offset, req_.length, req_.buffer, req_.capacity, path_);
      timers.read_ns += ns_since(t0);
      if (hash) {
        auto t1 = Clock::now();
        hash->update(src, req_.length);
        timers.hash_ns += ns_since(t1);
      }
      return src;
    }
    for (size_t p = 0; p < req_.length; p += kHashPiece) {
      const size_t m = std::min(kHashPiece, req_.length - p);
      auto t0 = Clock::now();
      read_range(fd_, false, req_.offset + p, m, req_.buffer + p, req_.capacity - p, path_);
      auto t1 = Clock::now();
      hash->update(req_.buffer + p, m);
      timers.read_ns += std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count();
      timers.hash_ns += ns_since(t1);
    }
    return req_.buffer;
  }

 private:
  int fd_;
  bool direct_;
  std::string path_;
  size_t slot_ = 0;
  ReadRequest req_;
};

#if TPSHARD_HAVE_URING
/// io_uring: up to depth reads in flight; completions may arrive in any order, complete() waits for its
/// slot's.
class UringReader final : public ChunkReader {
 public:
  UringReader(int fd, bool direct, int depth, std::string path)
      : fd_(fd), direct_(direct), depth_(depth), path_(std::move(path)) {}
  /// False when the kernel refuses io_uring (old kernel, seccomp): the caller falls back to pread.
  bool init() { return io_uring_queue_init(unsigned(depth_), &ring_, 0) == 0 && (ok_ = true); }
  ~UringReader() override {
    if (!ok_) return;
    // Reads still in flight write into staging buffers: wait for them before the ring (and the caller's
    // buffers) go away.
    while (in_flight_ > 0) {
      io_uring_cqe* cqe = nullptr;
      if (io_uring_wait_cqe(&ring_, &cqe) < 0) break;
      io_uring_cqe_seen(&ring_, cqe);
      --in_flight_;
    }
    io_uring_queue_exit(&ring_);
  }
  int depth() const override { return depth_; }
  void submit(size_t slot, const ReadRequest& req) override {
    uint64_t start = 0, end = 0;
    span(req, direct_, &start, &end);
    check_capacity(end - start, req.capacity, path_);
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    if (!sqe) throw Error(path_ + ": io_uring submission queue full", "this is a bug in the loader");
    io_uring_prep_read(sqe, fd_, req.buffer, unsigned(end - start), start);
    io_uring_sqe_set_data64(sqe, slot);
    const int r = io_uring_submit(&ring_);
    if (r < 0) throw_read_error(path_, start, -r, direct_);
    ++in_flight_;
    pending_[slot] = Pending{req, start, -1, false};
  }
  const uint8_t* complete(size_t slot, Xxh3Stream* hash, LoadTimers& timers) override {
    auto it = pending_.find(slot);
    if (it == pending_.end())
      throw Error(path_ + ": loader waited for a read it did not start", "this is a bug in the loader");
    auto t0 = Clock::now();
    while (!it->second.done) {
      io_uring_cqe* cqe = nullptr;
      const int w = io_uring_wait_cqe(&ring_, &cqe);
      if (w == -EINTR) continue;
      if (w < 0) throw_read_error(path_, it->second.start, -w, direct_);
      auto done = pending_.find(size_t(io_uring_cqe_get_data64(cqe)));
      if (done != pending_.end()) {
        done->second.result = cqe->res;
        done->second.done = true;
      }
      io_uring_cqe_seen(&ring_, cqe);
      --in_flight_;
    }
    Pending p = it->second;
    pending_.erase(it);
    const uint64_t need_end = p.req.offset + p.req.length;
    if (p.result < 0) throw_read_error(path_, p.start, -p.result, direct_);
    if (p.start + uint64_t(p.result) < need_end) {
      // A short read (rare: a signal, or the end of the file): the rest synchronously.
      const uint64_t got = uint64_t(p.result);
      if (got == 0) throw_truncated(path_, p.start);
      read_range(fd_, direct_, p.start + got, size_t(need_end - p.start - got), p.req.buffer + got,
                 p.req.capacity - size_t(got), path_);
    }
    timers.read_ns += ns_since(t0);
    const uint8_t* src = p.req.buffer + (p.req.offset - p.start);
    if (hash) {
      auto t1 = Clock::now();
      hash->update(src, p.req.length);
      timers.hash_ns += ns_since(t1);
    }
    return src;
  }

 private:
  struct Pending {
    ReadRequest req;
    uint64_t start = 0;
    int result = -1;
    bool done = false;
  };
  int fd_;
  bool direct_;
  int depth_;
  std::string path_;
  io_uring ring_{};
  bool ok_ = false;
  int in_flight_ = 0;
  std::unordered_map<size_t, Pending> pending_;
};
#endif

}  // namespace

const uint8_t* read_range(int fd, bool direct, uint64_t off, size_t len, uint8_t* buf, size_t cap,
                          const std::string& path) {
  ReadRequest r{off, len, buf, cap};
  uint64_t start = 0, end = 0;
  span(r, direct, &start, &end);
  check_capacity(end - start, cap, path);
  const uint64_t need_end = off + len;
  uint64_t pos = start;
  while (pos < need_end) {
    ssize_t got = pread(fd, buf + (pos - start), size_t(end - pos), off_t(pos));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) throw_read_error(path, pos, errno, direct);
    if (got == 0) throw_truncated(path, pos);
    pos += uint64_t(got);
  }
  return buf + (off - start);
}

std::unique_ptr<ChunkReader> make_chunk_reader(int fd, bool direct, IoEngine engine, int depth,
                                               const std::string& path, std::string* used) {
  const bool want_uring = engine == IoEngine::Uring || (engine == IoEngine::Auto && direct);
#if TPSHARD_HAVE_URING
  if (want_uring) {
    auto u = std::make_unique<UringReader>(fd, direct, std::clamp(depth, 1, 64), path);
    if (u->init()) {
      if (used) *used = direct ? "io_uring O_DIRECT" : "io_uring";
      return u;
    }
  }
#else
  (void)want_uring;
  (void)depth;
#endif
  if (used) *used = direct ? "pread O_DIRECT" : "pread";
  return std::make_unique<PreadReader>(fd, direct, path);
}

}  // namespace tpshard::load
