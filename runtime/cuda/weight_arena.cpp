// weight_arena.cpp: WeightArena (see weight_arena.h): one cudaMalloc sized from the shard header, and
// the data section streamed into it through a ring of pinned host buffers.
//   the ring: one cudaHostRegister'ed allocation sliced into buffers (2 MiB, 2 per reader thread);
//   reader threads take whole tensors, largest first; per chunk of its tensor a thread preads (or
//   O_DIRECT) into a free ring buffer -> XXH3 (its own running state: the chunk is still in cache) ->
//   cudaMemcpyAsync on the thread's copy stream -> event; a buffer is reused after its event. Threads
//   never wait for each other (each tensor's hash is one thread's), so reading, hashing and copying of
//   different tensors overlap; the largest tensors start first so that none is left alone at the end.
// zstd tensors: one reader decompresses the whole tensor (streaming) into ring buffers; byte-plane
// tensors land in a device scratch buffer first and are interleaved by a kernel.
#include "runtime/cuda/weight_arena.h"

#include <fcntl.h>
#include <unistd.h>
#include <zstd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "format/hash.h"
#include "runtime/cpu_budget.h"
#include "runtime/cuda/byte_planes.cuh"
#include "runtime/cuda/check.h"

namespace tpshard::cuda {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

constexpr uint64_t kPage = 4096;  // O_DIRECT alignment (offset, length, buffer)
/// Buffered reads with the hash check: each chunk is read and hashed in pieces of this size, so the hash
/// reads bytes still in the core's L2 cache rather than the whole chunk back from memory.
constexpr size_t kHashPiece = size_t(1) << 20;

std::string hex64(uint64_t v) {
  char b[19];
  snprintf(b, sizeof(b), "%016llx", static_cast<unsigned long long>(v));
  return b;
}

/// The ring: pinned host buffers (one allocation, sliced), each with the event of its last copy.
/// acquire() blocks until a buffer is free and its previous copy has finished. Pinned by cudaHostAlloc,
/// or (register) page-aligned host memory locked by cudaHostRegister, as InstantTensor does (falls back
/// to cudaHostAlloc where registering fails).
class PinnedRing {
 public:
  PinnedRing(size_t count, size_t bytes, bool register_memory) : bytes_(bytes), registered_(register_memory) {
    const size_t total = count * bytes;
    if (registered_) {
      base_ = static_cast<uint8_t*>(std::aligned_alloc(kPage, (total + kPage - 1) / kPage * kPage));
      TPS_CHECK(base_ != nullptr, "loader: out of host memory for a " + std::to_string(total >> 20) + " MiB ring",
                "free host memory or pass smaller ring buffers");
      if (cudaHostRegister(base_, total, cudaHostRegisterDefault) != cudaSuccess) {
        cudaGetLastError();  // clear it: cudaHostAlloc below is the fallback
        std::free(base_);
        base_ = nullptr;
        registered_ = false;
      }
    }
    if (!registered_) {
      void* p = nullptr;
      TPS_CUDA_CHECK(cudaHostAlloc(&p, total, cudaHostAllocDefault));
      base_ = static_cast<uint8_t*>(p);
    }
    for (size_t i = 0; i < count; ++i) {
      cudaEvent_t ev;
      TPS_CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
      events_.push_back(ev);
      free_.push_back(i);
    }
  }
  ~PinnedRing() {
    for (auto ev : events_) {
      cudaEventSynchronize(ev);
      cudaEventDestroy(ev);
    }
    if (registered_) {
      cudaHostUnregister(base_);
      std::free(base_);
    } else {
      cudaFreeHost(base_);
    }
  }
  size_t acquire() {
    size_t i;
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] { return !free_.empty(); });
      i = free_.front();
      free_.pop_front();
    }
    TPS_CUDA_CHECK(cudaEventSynchronize(events_[i]));
    return i;
  }
  /// Record the copy that reads buffer i on stream, then give the buffer back.
  void release(size_t i, cudaStream_t stream) {
    if (stream) TPS_CUDA_CHECK(cudaEventRecord(events_[i], stream));
    {
      std::lock_guard<std::mutex> lk(mu_);
      free_.push_back(i);
    }
    cv_.notify_one();
  }
  uint8_t* data(size_t i) const { return base_ + i * bytes_; }
  size_t bytes() const { return bytes_; }

 private:
  size_t bytes_;
  bool registered_;
  uint8_t* base_ = nullptr;
  std::vector<cudaEvent_t> events_;
  std::deque<size_t> free_;
  std::mutex mu_;
  std::condition_variable cv_;
};

/// Reads [off, off+len) of the file into buf (capacity cap). With O_DIRECT the read is widened to
/// page boundaries; returns the pointer to the first requested byte inside buf.
const uint8_t* read_range(int fd, bool direct, uint64_t off, size_t len, uint8_t* buf, size_t cap,
                          const std::string& path) {
  uint64_t start = direct ? (off & ~(kPage - 1)) : off;
  uint64_t end = direct ? ((off + len + kPage - 1) & ~(kPage - 1)) : off + len;
  TPS_CHECK(end - start <= cap, path + ": internal read of " + std::to_string(end - start) + " bytes exceeds the ring buffer",
            "this is a bug in the loader");
  uint64_t need_end = off + len;
  uint64_t pos = start;
  while (pos < need_end) {
    ssize_t r = pread(fd, buf + (pos - start), size_t(end - pos), off_t(pos));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0)
      throw Error(path + ": read failed at offset " + std::to_string(pos) + ": " + strerror(errno),
                  direct ? "retry without --direct-io (the file system may not support O_DIRECT)" : "check the disk");
    if (r == 0)
      throw Error(path + ": file is truncated (short read at offset " + std::to_string(pos) + ")",
                  "the shard file is incomplete; re-copy it or re-run tpshard convert");
    pos += uint64_t(r);
  }
  return buf + (off - start);
}

/// One unit of reader work: a whole tensor (its chunks are read one after another by one thread).
struct WorkItem {
  size_t tensor = 0;
  uint64_t bytes = 0;  ///< stored bytes
};

class Loader {
 public:
  Loader(const ShardReader& shard, const LoadOptions& opts, uint8_t* arena, LoadReport& rep)
      : shard_(shard), opts_(opts), arena_(arena), rep_(rep) {}

  void run() {
    const auto& tensors = shard_.tensors();
    const uint64_t arena_bytes = shard_.header().arena_bytes;
    const size_t buf_bytes = opts_.ring_buffer_bytes;
    TPS_CHECK(buf_bytes >= 4 * kPage, "load options: ring buffers must be at least 16 KiB",
              "use the defaults (2 MiB buffers, 2 per reader thread)");
    const uint64_t chunk = (buf_bytes - 2 * kPage) & ~(kPage - 1);  // slack for O_DIRECT widening
    size_t max_planes = 0;
    for (size_t i = 0; i < tensors.size(); ++i) {
      const TensorRecord& t = tensors[i];
      TPS_CHECK(t.arena_offset <= arena_bytes && t.raw_bytes <= arena_bytes - t.arena_offset,
                shard_.path() + ": tensor " + t.name + " does not fit in the arena (offset " +
                    std::to_string(t.arena_offset) + " + " + std::to_string(t.raw_bytes) + " > " +
                    std::to_string(arena_bytes) + ")",
                "the shard file is corrupt; re-run tpshard convert");
      if (t.codec == Codec::None) {
        TPS_CHECK(t.stored_bytes == t.raw_bytes,
                  shard_.path() + ": tensor " + t.name + " is uncompressed but stored_bytes != raw_bytes",
                  "the shard file is corrupt; re-run tpshard convert");
      } else if (t.codec == Codec::ZstdBytePlanes) {
        max_planes = std::max<size_t>(max_planes, t.raw_bytes);
      }
      if (t.stored_bytes > 0) items_.push_back({i, t.stored_bytes});
    }
    chunk_ = chunk;
    // Largest first (ties in file order): the long single-thread tensors (embedding, LM head) start at
    // once, the small ones fill the gaps at the end.
    std::stable_sort(items_.begin(), items_.end(), [](const WorkItem& a, const WorkItem& b) { return a.bytes > b.bytes; });

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
    // Small shards: no buffer larger than the largest piece of work, no more buffers than pieces.
    uint64_t largest = 0, pieces = 0;
    for (const WorkItem& w : items_) {
      const TensorRecord& t = tensors[w.tensor];
      const uint64_t piece = std::min<uint64_t>(chunk, t.codec == Codec::None ? w.bytes : t.raw_bytes);
      largest = std::max<uint64_t>(largest, piece);
      pieces += (std::max<uint64_t>(t.codec == Codec::None ? w.bytes : t.raw_bytes, 1) + chunk - 1) / chunk;
    }
    const int want_threads = opts_.reader_threads > 0 ? opts_.reader_threads : default_reader_threads(1);
    const size_t want_buffers = opts_.ring_buffers > 0 ? opts_.ring_buffers : 2 * static_cast<size_t>(want_threads);
    const size_t ring_bytes = size_t(std::min<uint64_t>(buf_bytes, ((largest + kPage - 1) & ~(kPage - 1)) + 2 * kPage));
    const size_t ring_count = std::max<size_t>(1, std::min<size_t>(want_buffers, static_cast<size_t>(pieces)));
    ring_ = std::make_unique<PinnedRing>(ring_count, std::max<size_t>(ring_bytes, 4 * kPage), opts_.register_ring);
    rep_.pinned_bytes = ring_count * ring_->bytes();
    if (max_planes > 0) TPS_CUDA_CHECK(cudaMalloc(&planes_scratch_, max_planes));
    rep_.setup_seconds += seconds_since(t_setup);

    int threads = std::max(1, std::min<int>(want_threads, int(ring_count)));
    threads = std::min<int>(threads, std::max<int>(1, int(items_.size())));
    rep_.reader_threads = threads;
    std::vector<std::thread> pool;
    std::vector<cudaStream_t> streams(threads, nullptr);
    int device = 0;
    TPS_CUDA_CHECK(cudaGetDevice(&device));
    for (int t = 0; t < threads; ++t) TPS_CUDA_CHECK(cudaStreamCreateWithFlags(&streams[t], cudaStreamNonBlocking));
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        try {
          TPS_CUDA_CHECK(cudaSetDevice(device));
          reader(fd, opts_.direct_io, streams[t]);
        } catch (...) {
          fail(std::current_exception());
        }
      });
    }
    for (auto& th : pool) th.join();
    for (auto s : streams) {
      cudaError_t e = cudaStreamSynchronize(s);
      if (e != cudaSuccess && !error_) error_ = std::make_exception_ptr(Error(
          shard_.path() + ": copy to the device failed: " + cudaGetErrorString(e), cuda_hint(e)));
      cudaStreamDestroy(s);
    }
    ring_.reset();
    if (planes_scratch_) cudaFree(planes_scratch_);
    if (direct_fd >= 0) close(direct_fd);
    rep_.read_seconds = read_ns_.load() * 1e-9;
    rep_.hash_seconds = hash_ns_.load() * 1e-9;
    rep_.decompress_seconds = zstd_ns_.load() * 1e-9;
    rep_.file_bytes = bytes_read_.load();
    if (error_) std::rethrow_exception(error_);
  }

 private:
  void fail(std::exception_ptr e) {
    std::lock_guard<std::mutex> lk(err_mu_);
    if (!error_) error_ = e;
    abort_ = true;
  }

  static int64_t ns_since(Clock::time_point t) {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t).count();
  }

  void check_hash(const TensorRecord& t, uint64_t got) {
    if (got != t.xxh3)
      throw Error(shard_.path() + ": tensor " + t.name + " is corrupt (XXH3 " + hex64(got) + ", expected " +
                      hex64(t.xxh3) + ")",
                  "the shard file was damaged after conversion; re-copy it or re-run tpshard convert "
                  "(tpshard verify names every bad tensor)");
  }

  void reader(int fd, bool direct, cudaStream_t stream) {
    Xxh3Stream hash;  // this thread's (format/hash.h: the widest XXH3 the CPU runs)
    for (;;) {
      if (abort_) return;
      size_t k = next_.fetch_add(1);
      if (k >= items_.size()) return;
      const WorkItem& w = items_[k];
      const TensorRecord& t = shard_.tensors()[w.tensor];
      hash.reset();
      if (t.codec == Codec::None) {
        copy_tensor(fd, direct, t, stream, hash);
      } else {
        decompress_tensor(fd, direct, t, stream, hash);
      }
    }
  }

  /// An uncompressed tensor, chunk by chunk through the ring; its hash checked after the last chunk.
  void copy_tensor(int fd, bool direct, const TensorRecord& t, cudaStream_t stream, Xxh3Stream& hs) {
    for (uint64_t off = 0; off < t.stored_bytes; off += chunk_) {
      if (abort_) return;
      const size_t n = size_t(std::min<uint64_t>(chunk_, t.stored_bytes - off));
      size_t b = ring_->acquire();
      try {
        const uint64_t at = shard_.header().data_offset + t.file_offset + off;
        const uint8_t* src = nullptr;
        if (direct || !opts_.verify_hashes) {
          auto t0 = Clock::now();
          src = read_range(fd, direct, at, n, ring_->data(b), ring_->bytes(), shard_.path());
          read_ns_ += ns_since(t0);
          if (opts_.verify_hashes) {
            auto t1 = Clock::now();
            hs.update(src, n);
            hash_ns_ += ns_since(t1);
          }
        } else {
          // Read and hash in pieces that stay in the core's cache: the hash reads what pread just wrote.
          src = ring_->data(b);
          for (size_t p = 0; p < n; p += kHashPiece) {
            const size_t m = std::min<size_t>(kHashPiece, n - p);
            auto t0 = Clock::now();
            read_range(fd, false, at + p, m, ring_->data(b) + p, ring_->bytes() - p, shard_.path());
            auto t1 = Clock::now();
            hs.update(src + p, m);
            read_ns_ += std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count();
            hash_ns_ += ns_since(t1);
          }
        }
        bytes_read_ += n;
        TPS_CUDA_CHECK(cudaMemcpyAsync(arena_ + t.arena_offset + off, src, n, cudaMemcpyHostToDevice, stream));
      } catch (...) {
        ring_->release(b, nullptr);
        throw;
      }
      ring_->release(b, stream);
    }
    if (opts_.verify_hashes) check_hash(t, hs.digest());
  }

  void decompress_tensor(int fd, bool direct, const TensorRecord& t, cudaStream_t stream, Xxh3Stream& hs) {
    TPS_CHECK(t.codec == Codec::Zstd || t.codec == Codec::ZstdBytePlanes,
              shard_.path() + ": tensor " + t.name + " has unknown codec " + std::to_string(int(t.codec)),
              "this build cannot read it; update tprun");
    const bool planes = t.codec == Codec::ZstdBytePlanes;
    std::unique_lock<std::mutex> scratch_lock(scratch_mu_, std::defer_lock);
    if (planes) {
      TPS_CHECK(t.raw_bytes % 2 == 0, shard_.path() + ": byte-plane tensor " + t.name + " has an odd byte count",
                "the shard file is corrupt; re-run tpshard convert");
      scratch_lock.lock();
    }
    uint8_t* dst = planes ? static_cast<uint8_t*>(planes_scratch_) : arena_ + t.arena_offset;

    // Input staging: plain host memory, page aligned for O_DIRECT (bounded: one per reader thread).
    const size_t in_cap = 4u << 20;
    std::unique_ptr<uint8_t, decltype(&free)> in(static_cast<uint8_t*>(aligned_alloc(kPage, in_cap + 2 * kPage)), &free);
    std::unique_ptr<ZSTD_DCtx, decltype(&ZSTD_freeDCtx)> dctx(ZSTD_createDCtx(), &ZSTD_freeDCtx);
    TPS_CHECK(in && dctx, "out of host memory while loading " + t.name, "free host memory");

    uint64_t consumed = 0, produced = 0;
    size_t b = ring_->acquire();
    ZSTD_outBuffer out{ring_->data(b), std::min<size_t>(ring_->bytes(), t.raw_bytes), 0};
    size_t ret = 1;
    auto flush = [&](bool final_flush) {
      if (out.pos > 0) {
        TPS_CUDA_CHECK(cudaMemcpyAsync(dst + produced, out.dst, out.pos, cudaMemcpyHostToDevice, stream));
        produced += out.pos;
      }
      ring_->release(b, stream);
      if (!final_flush) {
        b = ring_->acquire();
        out = ZSTD_outBuffer{ring_->data(b), std::min<size_t>(ring_->bytes(), size_t(t.raw_bytes - produced)), 0};
      }
    };
    try {
      while (consumed < t.stored_bytes) {
        if (abort_) {
          ring_->release(b, nullptr);
          return;
        }
        size_t n = size_t(std::min<uint64_t>(in_cap, t.stored_bytes - consumed));
        auto t0 = Clock::now();
        const uint8_t* src = read_range(fd, direct, shard_.header().data_offset + t.file_offset + consumed, n,
                                        in.get(), in_cap + 2 * kPage, shard_.path());
        read_ns_ += ns_since(t0);
        bytes_read_ += n;
        consumed += n;
        if (opts_.verify_hashes) {
          auto t1 = Clock::now();
          hs.update(src, n);
          hash_ns_ += ns_since(t1);
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
          zstd_ns_ += ns_since(t2);
          if (ZSTD_isError(ret))
            throw Error(shard_.path() + ": tensor " + t.name + ": zstd: " + ZSTD_getErrorName(ret),
                        "the shard file is corrupt; re-run tpshard convert");
          TPS_CHECK(extra.pos == 0,
                    shard_.path() + ": tensor " + t.name + " decompresses to more than its " +
                        std::to_string(t.raw_bytes) + " bytes",
                    "the shard file is corrupt; re-run tpshard convert");
        }
      }
      if (opts_.verify_hashes) check_hash(t, hs.digest());
      TPS_CHECK(ret == 0 && produced + out.pos == t.raw_bytes,
                shard_.path() + ": tensor " + t.name + " decompressed to " + std::to_string(produced + out.pos) +
                    " bytes, expected " + std::to_string(t.raw_bytes) + (ret != 0 ? " (frame incomplete)" : ""),
                "the shard file is corrupt; re-run tpshard convert");
      flush(true);
    } catch (...) {
      ring_->release(b, nullptr);
      throw;
    }
    if (planes) {
      interleave_byte_planes(dst, arena_ + t.arena_offset, size_t(t.raw_bytes / 2), stream);
      TPS_CUDA_CHECK(cudaStreamSynchronize(stream));  // the scratch is free again after this
    }
  }

  const ShardReader& shard_;
  const LoadOptions& opts_;
  uint8_t* arena_;
  LoadReport& rep_;
  std::vector<WorkItem> items_;  ///< largest first
  uint64_t chunk_ = 0;           ///< bytes per read of an uncompressed tensor
  std::unique_ptr<PinnedRing> ring_;
  void* planes_scratch_ = nullptr;
  std::mutex scratch_mu_;
  std::atomic<size_t> next_{0};
  std::atomic<bool> abort_{false};
  std::mutex err_mu_;
  std::exception_ptr error_;
  std::atomic<int64_t> read_ns_{0}, hash_ns_{0}, zstd_ns_{0};
  std::atomic<uint64_t> bytes_read_{0};
};

}  // namespace

int default_reader_threads(int local_ranks) {
  return std::clamp(usable_cpus() / std::max(1, local_ranks), 2, 32);  // affinity mask and cgroup quota
}

WeightArena::WeightArena(const ShardReader& shard, const LoadOptions& opts, LoadReport* report)
    : path_(shard.path()) {
  auto t0 = Clock::now();
  LoadReport local;
  LoadReport& rep = report ? *report : local;
  rep = LoadReport{};
  const uint64_t need = shard.header().arena_bytes;
  size_t free_b = 0, total_b = 0;
  TPS_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  if (need > free_b) {
    throw Error(path_ + ": weights need " + std::to_string(need >> 20) + " MiB of device memory but only " +
                    std::to_string(free_b >> 20) + " MiB of " + std::to_string(total_b >> 20) + " MiB are free (" +
                    check_where() + ")",
                "use a larger --tp (weights are split across ranks) or free the GPU (nvidia-smi shows its processes)");
  }
  auto t_alloc = Clock::now();
  if (need > 0) {
    TPS_CUDA_CHECK(cudaMalloc(&base_, need));
    // Zero the padding between tensors so the arena equals the data section byte for byte.
    TPS_CUDA_CHECK(cudaMemset(base_, 0, need));
    TPS_CUDA_CHECK(cudaDeviceSynchronize());
  }
  bytes_ = need;
  rep.setup_seconds = seconds_since(t_alloc);
  try {
    Loader loader(shard, opts, static_cast<uint8_t*>(base_), rep);
    loader.run();
  } catch (...) {
    if (base_) cudaFree(base_);
    base_ = nullptr;
    throw;
  }
  for (const auto& t : shard.tensors()) records_.emplace(t.name, t);
  rep.arena_bytes = bytes_;
  rep.seconds = seconds_since(t0);
}

WeightArena::~WeightArena() {
  if (base_) cudaFree(base_);
}

const void* WeightArena::find(const std::string& name) const {
  auto it = records_.find(name);
  if (it == records_.end()) return nullptr;
  return static_cast<const uint8_t*>(base_) + it->second.arena_offset;
}

const void* WeightArena::at(const std::string& name) const {
  const void* p = find(name);
  if (!p)
    throw Error(path_ + ": tensor " + name + " is not in this shard",
                "the model directory does not match this architecture; re-run tpshard convert");
  return p;
}

const TensorRecord& WeightArena::record(const std::string& name) const {
  auto it = records_.find(name);
  if (it == records_.end())
    throw Error(path_ + ": tensor " + name + " is not in this shard",
                "the model directory does not match this architecture; re-run tpshard convert");
  return it->second;
}

}  // namespace tpshard::cuda
