// shard_stream.cpp: stream_shard (shard_stream.h): work order, staging ring, reader threads, hashes, zstd.
#include "runtime/load/shard_stream.h"

#include <fcntl.h>
#include <unistd.h>
#include <zstd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <limits>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "format/error.h"
#include "format/hash.h"
#include "runtime/load/chunk_reader.h"

namespace tpshard::load {
namespace {

using Clock = std::chrono::steady_clock;
int64_t ns_since(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t).count();
}

constexpr size_t kNone = std::numeric_limits<size_t>::max();
constexpr int kDefaultQueueDepth = 4;
const char* const kCorruptHint = "the shard file is corrupt; re-run tpshard convert";

std::string hex64(uint64_t v) {
  char b[19];
  snprintf(b, sizeof(b), "%016llx", static_cast<unsigned long long>(v));
  return b;
}

/// The target's staging buffers as a free list. acquire() blocks until a buffer is free and the copies
/// out of it are done; abort() wakes every waiter (acquire then returns kNone).
class StagingRing {
 public:
  StagingRing(LoadTarget& target, size_t count) : target_(target) {
    for (size_t i = 0; i < count; ++i) free_.push_back(i);
  }
  size_t acquire() {
    size_t i;
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] { return aborted_ || !free_.empty(); });
      if (aborted_) return kNone;
      i = free_.front();
      free_.pop_front();
    }
    target_.wait_staging(i);
    return i;
  }
  /// A free buffer if one is free now (its copies are then waited for), else kNone.
  size_t try_acquire() {
    size_t i;
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (aborted_ || free_.empty()) return kNone;
      i = free_.front();
      free_.pop_front();
    }
    target_.wait_staging(i);
    return i;
  }
  /// Gives buffer i back; copied: copies out of it were issued by reader (the target marks them).
  void release(int reader, size_t i, bool copied) {
    if (copied) target_.release_staging(reader, i);
    {
      std::lock_guard<std::mutex> lk(mu_);
      free_.push_back(i);
    }
    cv_.notify_one();
  }
  void abort() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      aborted_ = true;
    }
    cv_.notify_all();
  }

 private:
  LoadTarget& target_;
  std::deque<size_t> free_;
  bool aborted_ = false;
  std::mutex mu_;
  std::condition_variable cv_;
};

/// One unit of reader work: a whole tensor (its chunks are read one after another by one thread).
struct WorkItem {
  size_t tensor = 0;
  uint64_t bytes = 0;  ///< stored bytes
};

class Streamer {
 public:
  Streamer(const ShardReader& shard, const LoadOptions& opts, LoadTarget& target, LoadReport& rep)
      : shard_(shard), opts_(opts), target_(target), rep_(rep) {}

  void run() {
    const auto& tensors = shard_.tensors();
    const uint64_t arena_bytes = shard_.header().arena_bytes;
    const size_t buf_bytes = opts_.ring_buffer_bytes;
    if (buf_bytes < 4 * kPage)
      throw Error("load options: staging buffers must be at least 16 KiB",
                  "use the defaults (4 MiB buffers)");
    chunk_ = (buf_bytes - 2 * kPage) & ~(kPage - 1);  // slack for O_DIRECT widening
    uint64_t max_planes = 0;
    for (size_t i = 0; i < tensors.size(); ++i) {
      const TensorRecord& t = tensors[i];
      if (!(t.arena_offset <= arena_bytes && t.raw_bytes <= arena_bytes - t.arena_offset))
        throw Error(shard_.path() + ": tensor " + t.name + " does not fit in the arena (offset " +
                        std::to_string(t.arena_offset) + " + " + std::to_string(t.raw_bytes) + " > " +
                        std::to_string(arena_bytes) + ")",
                    kCorruptHint);
      if (t.codec == Codec::None && t.stored_bytes != t.raw_bytes)
        throw Error(shard_.path() + ": tensor " + t.name + " is uncompressed but stored_bytes != raw_bytes",
                    kCorruptHint);
      if (t.codec == Codec::ZstdBytePlanes) max_planes = std::max<uint64_t>(max_planes, t.raw_bytes);
      if (t.stored_bytes > 0) items_.push_back({i, t.stored_bytes});
    }
    // Largest first (ties in file order): the long single-thread tensors (embedding, LM head) start at
    // once, the small ones fill the gaps at the end.
    std::stable_sort(items_.begin(), items_.end(),
                     [](const WorkItem& a, const WorkItem& b) { return a.bytes > b.bytes; });

    auto t_setup = Clock::now();
    int fd = shard_.fd();
    int direct_fd = -1;
    if (opts_.direct_io) {
      direct_fd = open(shard_.path().c_str(), O_RDONLY | O_DIRECT);
      if (direct_fd < 0)
        throw Error(shard_.path() + ": cannot open with O_DIRECT: " + strerror(errno),
                    "this file system does not support O_DIRECT; drop --direct-io");
      fd = direct_fd;
    }
    struct CloseFd {
      int fd;
      ~CloseFd() {
        if (fd >= 0) close(fd);
      }
    } close_direct{direct_fd};

    const bool uring = opts_.io == IoEngine::Uring || (opts_.io == IoEngine::Auto && opts_.direct_io);
    depth_ = uring ? std::clamp(opts_.queue_depth > 0 ? opts_.queue_depth : kDefaultQueueDepth, 1, 64) : 1;
    // Small shards: no buffer larger than the largest piece of work, no more buffers than pieces.
    uint64_t largest = 0, pieces = 0;
    for (const WorkItem& w : items_) {
      const TensorRecord& t = tensors[w.tensor];
      const uint64_t work = t.codec == Codec::None ? w.bytes : t.raw_bytes;
      largest = std::max<uint64_t>(largest, std::min<uint64_t>(chunk_, work));
      pieces += (std::max<uint64_t>(work, 1) + chunk_ - 1) / chunk_;
    }
    const int want_threads = opts_.reader_threads > 0 ? opts_.reader_threads : default_reader_threads(1);
    const size_t want_buffers =
        opts_.ring_buffers > 0 ? opts_.ring_buffers : size_t(depth_ + 1) * static_cast<size_t>(want_threads);
    const size_t ring_bytes = std::max<size_t>(
        size_t(std::min<uint64_t>(buf_bytes, ((largest + kPage - 1) & ~(kPage - 1)) + 2 * kPage)), 4 * kPage);
    const size_t ring_count =
        std::max<size_t>(1, std::min<size_t>(want_buffers, static_cast<size_t>(pieces)));
    int threads = std::max(1, std::min<int>(want_threads, int(ring_count)));
    threads = std::min<int>(threads, std::max<int>(1, int(items_.size())));
    target_.prepare(ring_count, ring_bytes, threads, max_planes);
    ring_ = std::make_unique<StagingRing>(target_, ring_count);
    ring_bytes_ = ring_bytes;
    rep_.pinned_bytes = target_.staging_bytes();
    rep_.setup_seconds += std::chrono::duration<double>(Clock::now() - t_setup).count();
    rep_.reader_threads = threads;

    std::vector<std::thread> pool;
    std::vector<std::string> used(static_cast<size_t>(threads));
    std::atomic<int> depth_used{1};
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        try {
          target_.start_reader(t);
          reader(t, fd, &used[size_t(t)], t == 0 ? &depth_used : nullptr);
          target_.finish_reader(t);
        } catch (...) {
          fail(std::current_exception());
        }
      });
    }
    for (auto& th : pool) th.join();
    rep_.io = used[0];
    rep_.queue_depth = depth_used.load();
    rep_.read_seconds += timers_.read_ns.load() * 1e-9;
    rep_.hash_seconds += timers_.hash_ns.load() * 1e-9;
    rep_.decompress_seconds += timers_.zstd_ns.load() * 1e-9;
    rep_.file_bytes = bytes_read_.load();
    if (error_) std::rethrow_exception(error_);
  }

 private:
  void fail(std::exception_ptr e) {
    {
      std::lock_guard<std::mutex> lk(err_mu_);
      if (!error_) error_ = e;
    }
    abort_ = true;
    if (ring_) ring_->abort();
  }

  void check_hash(const TensorRecord& t, uint64_t got) const {
    if (got != t.xxh3)
      throw Error(shard_.path() + ": tensor " + t.name + " is corrupt (XXH3 " + hex64(got) + ", expected " +
                      hex64(t.xxh3) + ")",
                  "the shard file was damaged after conversion; re-copy it or re-run tpshard convert "
                  "(tpshard verify names every bad tensor)");
  }

  void reader(int r, int fd, std::string* used, std::atomic<int>* depth_used) {
    std::unique_ptr<ChunkReader> chunks =
        make_chunk_reader(fd, opts_.direct_io, opts_.io, depth_, shard_.path(), used);
    if (depth_used) *depth_used = chunks->depth();
    Xxh3Stream hash;  // this thread's (format/hash.h: the widest XXH3 the CPU runs)
    for (;;) {
      if (abort_) return;
      const size_t k = next_.fetch_add(1);
      if (k >= items_.size()) return;
      const TensorRecord& t = shard_.tensors()[items_[k].tensor];
      hash.reset();
      if (t.codec == Codec::None) {
        copy_tensor(r, *chunks, t, hash);
      } else {
        decompress_tensor(r, fd, t, hash);
      }
    }
  }

  /// An uncompressed tensor, chunk by chunk through the ring with up to depth reads in flight (in file
  /// order, so the running hash sees the bytes in order); its hash checked after the last chunk.
  void copy_tensor(int r, ChunkReader& chunks, const TensorRecord& t, Xxh3Stream& hash) {
    struct InFlight {
      size_t buffer;
      uint64_t offset;  ///< within the tensor
      size_t bytes;
    };
    std::deque<InFlight> q;
    Xxh3Stream* hs = opts_.verify_hashes ? &hash : nullptr;
    auto complete_front = [&] {
      const InFlight f = q.front();
      const uint8_t* src = chunks.complete(f.buffer, hs, timers_);
      q.pop_front();
      bytes_read_ += f.bytes;
      target_.copy(r, f.buffer, src, f.bytes, t.arena_offset + f.offset, false);
      ring_->release(r, f.buffer, true);
    };
    // On an error the buffers of q are not given back: their reads may still be in flight (the load is over).
    for (uint64_t off = 0; off < t.stored_bytes; off += chunk_) {
      const size_t n = size_t(std::min<uint64_t>(chunk_, t.stored_bytes - off));
      size_t b = kNone;
      // Never block on the ring while holding reads of our own in flight: complete one instead.
      while (b == kNone) {
        if (abort_) return;
        if (int(q.size()) >= chunks.depth()) {
          complete_front();
        } else if (q.empty()) {
          b = ring_->acquire();
          if (b == kNone) return;  // aborted
        } else if ((b = ring_->try_acquire()) == kNone) {
          complete_front();
        }
      }
      q.push_back({b, off, n});
      chunks.submit(b, ReadRequest{shard_.header().data_offset + t.file_offset + off, n, target_.staging(b),
                                   ring_bytes_});
    }
    while (!q.empty()) complete_front();
    if (hs) check_hash(t, hash.digest());
  }

  void decompress_tensor(int r, int fd, const TensorRecord& t, Xxh3Stream& hs) {
    if (t.codec != Codec::Zstd && t.codec != Codec::ZstdBytePlanes)
      throw Error(shard_.path() + ": tensor " + t.name + " has unknown codec " + std::to_string(int(t.codec)),
                  "this build cannot read it; update tprun");
    const bool planes = t.codec == Codec::ZstdBytePlanes;
    std::unique_lock<std::mutex> scratch_lock(scratch_mu_, std::defer_lock);
    if (planes) {
      if (t.raw_bytes % 2 != 0)
        throw Error(shard_.path() + ": byte-plane tensor " + t.name + " has an odd byte count", kCorruptHint);
      scratch_lock.lock();
    }
    const uint64_t dst0 = planes ? 0 : t.arena_offset;

    // Input staging: plain host memory, page aligned for O_DIRECT (bounded: one per reader thread).
    const size_t in_cap = 4u << 20;
    std::unique_ptr<uint8_t, decltype(&free)> in(
        static_cast<uint8_t*>(aligned_alloc(kPage, in_cap + 2 * kPage)), &free);
    std::unique_ptr<ZSTD_DCtx, decltype(&ZSTD_freeDCtx)> dctx(ZSTD_createDCtx(), &ZSTD_freeDCtx);
    if (!in || !dctx) throw Error("out of host memory while loading " + t.name, "free host memory");

    uint64_t consumed = 0, produced = 0;
    size_t b = ring_->acquire();
    if (b == kNone) return;
    ZSTD_outBuffer out{target_.staging(b), std::min<size_t>(ring_bytes_, t.raw_bytes), 0};
    size_t ret = 1;
    auto flush = [&](bool final_flush) {
      const bool copied = out.pos > 0;
      if (copied) {
        target_.copy(r, b, static_cast<const uint8_t*>(out.dst), out.pos, dst0 + produced, planes);
        produced += out.pos;
      }
      ring_->release(r, b, copied);
      b = kNone;
      if (!final_flush) {
        b = ring_->acquire();
        if (b == kNone) throw Error(shard_.path() + ": load aborted", "see the first error");
        out = ZSTD_outBuffer{target_.staging(b),
                             std::min<size_t>(ring_bytes_, size_t(t.raw_bytes - produced)), 0};
      }
    };
    try {
      while (consumed < t.stored_bytes) {
        if (abort_) {
          ring_->release(r, b, false);
          return;
        }
        const size_t n = size_t(std::min<uint64_t>(in_cap, t.stored_bytes - consumed));
        auto t0 = Clock::now();
        const uint8_t* src =
            read_range(fd, opts_.direct_io, shard_.header().data_offset + t.file_offset + consumed, n,
                       in.get(), in_cap + 2 * kPage, shard_.path());
        timers_.read_ns += ns_since(t0);
        bytes_read_ += n;
        consumed += n;
        if (opts_.verify_hashes) {
          auto t1 = Clock::now();
          hs.update(src, n);
          timers_.hash_ns += ns_since(t1);
        }
        ZSTD_inBuffer inb{src, n, 0};
        while (inb.pos < inb.size) {
          if (out.pos == out.size && produced + out.pos < t.raw_bytes) flush(false);
          // Output full: only a frame epilogue may follow; any further byte means the tensor is too long.
          uint8_t extra_byte = 0;
          ZSTD_outBuffer extra{&extra_byte, 1, 0};
          const bool full = out.pos == out.size;
          auto t2 = Clock::now();
          ret = ZSTD_decompressStream(dctx.get(), full ? &extra : &out, &inb);
          timers_.zstd_ns += ns_since(t2);
          if (ZSTD_isError(ret))
            throw Error(shard_.path() + ": tensor " + t.name + ": zstd: " + ZSTD_getErrorName(ret),
                        kCorruptHint);
          if (extra.pos != 0)
            throw Error(shard_.path() + ": tensor " + t.name + " decompresses to more than its " +
                            std::to_string(t.raw_bytes) + " bytes",
                        kCorruptHint);
        }
      }
      if (opts_.verify_hashes) check_hash(t, hs.digest());
      if (!(ret == 0 && produced + out.pos == t.raw_bytes))
        throw Error(shard_.path() + ": tensor " + t.name + " decompressed to " +
                        std::to_string(produced + out.pos) + " bytes, expected " +
                        std::to_string(t.raw_bytes) + (ret != 0 ? " (frame incomplete)" : ""),
                    kCorruptHint);
      flush(true);
    } catch (...) {
      if (b != kNone) ring_->release(r, b, false);
      throw;
    }
    if (planes) target_.interleave_planes(r, t.raw_bytes, t.arena_offset);  // the scratch is free after this
  }

  const ShardReader& shard_;
  const LoadOptions& opts_;
  LoadTarget& target_;
  LoadReport& rep_;
  std::vector<WorkItem> items_;  ///< largest first
  uint64_t chunk_ = 0;           ///< bytes per read of an uncompressed tensor
  size_t ring_bytes_ = 0;        ///< bytes per staging buffer
  int depth_ = 1;                ///< reads in flight per thread
  std::unique_ptr<StagingRing> ring_;
  std::mutex scratch_mu_;
  std::atomic<size_t> next_{0};
  std::atomic<bool> abort_{false};
  std::mutex err_mu_;
  std::exception_ptr error_;
  LoadTimers timers_;
  std::atomic<uint64_t> bytes_read_{0};
};

}  // namespace

void stream_shard(const ShardReader& shard, const LoadOptions& opts, LoadTarget& target, LoadReport& report) {
  Streamer(shard, opts, target, report).run();
}

}  // namespace tpshard::load
