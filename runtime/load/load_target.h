// load_target.h: where stream_shard (shard_stream.h) puts a shard's bytes. The CUDA weight arena is one
// target (pinned staging buffers, asynchronous host-to-device copies, runtime/cuda/weight_arena.cpp);
// HostLoadTarget is the other (host memory: the loader's threads, ring and checks run without a GPU).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace tpshard::load {

/// Call order, from stream_shard: prepare() once; then on each reader thread start_reader(r), any number of
/// copy() / release_staging() / wait_staging() / interleave_planes(), finish_reader(r). copy() and
/// release_staging() of one reader are called from that reader's thread only; the other calls may come
/// from any thread. Errors are thrown as Error.
class LoadTarget {
 public:
  virtual ~LoadTarget() = default;
  /// Make `count` staging buffers of `bytes` each (4 KiB aligned: O_DIRECT reads land in them), stream
  /// state for `readers` threads, and, when scratch_bytes > 0, a scratch area for byte-plane tensors.
  virtual void prepare(size_t count, size_t bytes, int readers, uint64_t scratch_bytes) = 0;
  virtual uint8_t* staging(size_t buffer) = 0;
  /// Bytes of staging memory allocated (count x bytes after prepare()).
  virtual size_t staging_bytes() const = 0;
  virtual void start_reader(int reader) = 0;
  /// Copy n bytes at src (inside staging buffer `buffer`) to byte `dst` of the weights (or of the scratch
  /// area when to_scratch). May return before the copy is done: the loader reuses the buffer only after
  /// release_staging(reader, buffer) and a later wait_staging(buffer).
  virtual void copy(int reader, size_t buffer, const uint8_t* src, size_t n, uint64_t dst,
                    bool to_scratch) = 0;
  /// The buffer's copies are all issued (a device target records an event after them).
  virtual void release_staging(int reader, size_t buffer) = 0;
  /// Blocks until the copies issued from the buffer are done.
  virtual void wait_staging(size_t buffer) = 0;
  /// Scratch holds a byte-plane tensor of raw_bytes (low bytes, then high bytes, format/shard_file.h):
  /// write it interleaved to byte `dst` of the weights; the scratch is reusable when this returns.
  virtual void interleave_planes(int reader, uint64_t raw_bytes, uint64_t dst) = 0;
  /// Blocks until every copy this reader issued is done.
  virtual void finish_reader(int reader) = 0;
};

/// Host memory target: `weights` (caller-owned, at least the shard's arena_bytes) filled by memcpy.
/// Used by the tests of the loader and by tools that check a shard without a GPU.
class HostLoadTarget final : public LoadTarget {
 public:
  HostLoadTarget(uint8_t* weights, uint64_t weights_bytes);
  ~HostLoadTarget() override;
  void prepare(size_t count, size_t bytes, int readers, uint64_t scratch_bytes) override;
  uint8_t* staging(size_t buffer) override { return staging_ + buffer * buffer_bytes_; }
  size_t staging_bytes() const override { return count_ * buffer_bytes_; }
  void start_reader(int) override {}
  void copy(int reader, size_t buffer, const uint8_t* src, size_t n, uint64_t dst, bool to_scratch) override;
  void release_staging(int, size_t) override {}
  void wait_staging(size_t) override {}
  void interleave_planes(int reader, uint64_t raw_bytes, uint64_t dst) override;
  void finish_reader(int) override {}

 private:
  uint8_t* weights_;
  uint64_t weights_bytes_;
  uint8_t* staging_ = nullptr;
  size_t count_ = 0, buffer_bytes_ = 0;
  std::vector<uint8_t> scratch_;
};

}  // namespace tpshard::load
