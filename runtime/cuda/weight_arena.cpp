// weight_arena.cpp: WeightArena (see weight_arena.h): one cudaMalloc sized from the shard header, and
// the data section streamed into it by runtime/load/shard_stream.h through DeviceTarget:
//   staging ring: one cudaHostRegister'ed (or cudaHostAlloc'ed) allocation sliced into buffers, each with
//   the event of its last copy; each reader thread copies on its own non-blocking stream
//   (cudaMemcpyAsync), and a buffer is reused after its event. Byte-plane tensors land in a device
//   scratch buffer and are interleaved by a kernel.
#include "runtime/cuda/weight_arena.h"

#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <vector>

#include "runtime/cuda/byte_planes.cuh"
#include "runtime/cuda/check.h"
#include "runtime/load/chunk_reader.h"
#include "runtime/load/load_target.h"
#include "runtime/load/shard_stream.h"

namespace tpshard::cuda {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

/// Bytes of a transparent huge page: the lazily registered ring is aligned to it and advised to use them
/// (pinning a 64 MiB ring measured 10-15 ms with huge pages vs 20-33 ms with 4 KiB pages on an H100 host).
constexpr size_t kHugePage = size_t(2) << 20;

/// The device target of the loader: pinned staging buffers (RingPinning, load_options.h), one stream per
/// reader thread, an event per buffer.
class DeviceTarget final : public load::LoadTarget {
 public:
  DeviceTarget(uint8_t* arena, uint64_t arena_bytes, load::RingPinning pinning, std::string path)
      : arena_(arena), arena_bytes_(arena_bytes), pinning_(pinning), path_(std::move(path)) {
    TPS_CUDA_CHECK(cudaGetDevice(&device_));
  }
  ~DeviceTarget() override {
    for (auto s : streams_) {
      if (!s) continue;
      cudaStreamSynchronize(s);
      cudaStreamDestroy(s);
    }
    for (auto ev : events_) {
      cudaEventSynchronize(ev);
      cudaEventDestroy(ev);
    }
    if (base_) {
      if (pinning_ == load::RingPinning::HostAlloc) {
        cudaFreeHost(base_);
      } else {
        if (pinning_ == load::RingPinning::RegisterUpfront) cudaHostUnregister(base_);
        for (size_t i = 0; i < pinned_.size(); ++i)
          if (pinned_[i]) cudaHostUnregister(staging(i));
        std::free(base_);
      }
    }
    if (scratch_) cudaFree(scratch_);
  }

  void prepare(size_t count, size_t bytes, int readers, uint64_t scratch_bytes) override {
    const size_t total = count * bytes;
    count_ = count;
    bytes_ = bytes;
    if (pinning_ != load::RingPinning::HostAlloc) {
      const size_t align = pinning_ == load::RingPinning::RegisterLazy ? kHugePage : load::kPage;
      base_ = static_cast<uint8_t*>(std::aligned_alloc(align, (total + align - 1) / align * align));
      TPS_CHECK(base_ != nullptr, "loader: out of host memory for a " + std::to_string(total >> 20) + " MiB ring",
                "free host memory or pass smaller ring buffers");
      bool ok;
      if (pinning_ == load::RingPinning::RegisterLazy) {
        madvise(base_, (total + align - 1) / align * align, MADV_HUGEPAGE);  // advice only: 4 KiB pages work too
        pinned_.assign(count, 0);
        ok = register_buffer(0);  // the rest by the reader threads, on first use (copy())
      } else {
        ok = cudaHostRegister(base_, total, cudaHostRegisterDefault) == cudaSuccess;
      }
      if (!ok) {  // some hosts refuse to register memory: cudaHostAlloc is the fallback
        cudaGetLastError();
        pinned_.clear();
        std::free(base_);
        base_ = nullptr;
        pinning_ = load::RingPinning::HostAlloc;
      }
    }
    if (pinning_ == load::RingPinning::HostAlloc) {
      void* p = nullptr;
      TPS_CUDA_CHECK(cudaHostAlloc(&p, total, cudaHostAllocDefault));
      base_ = static_cast<uint8_t*>(p);
    }
    for (size_t i = 0; i < count; ++i) {
      cudaEvent_t ev;
      TPS_CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
      events_.push_back(ev);
    }
    streams_.assign(size_t(readers), nullptr);
    for (auto& s : streams_) TPS_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    if (scratch_bytes > 0) TPS_CUDA_CHECK(cudaMalloc(&scratch_, scratch_bytes));
    scratch_bytes_ = scratch_bytes;
  }
  uint8_t* staging(size_t i) override { return base_ + i * bytes_; }
  size_t staging_bytes() const override { return count_ * bytes_; }
  void start_reader(int) override { TPS_CUDA_CHECK(cudaSetDevice(device_)); }
  void copy(int reader, size_t buffer, const uint8_t* src, size_t n, uint64_t dst, bool to_scratch) override {
    const uint64_t limit = to_scratch ? scratch_bytes_ : arena_bytes_;
    TPS_CHECK(dst <= limit && n <= limit - dst, path_ + ": loader copy past the end of the weights",
              "this is a bug in the loader");
    uint8_t* base = to_scratch ? static_cast<uint8_t*>(scratch_) : arena_;
    // The buffer is this thread's until released (the ring's lock orders its holders): no race on pinned_.
    if (!pinned_.empty() && !pinned_[buffer] && !register_buffer(buffer))
      throw Error(path_ + ": cannot pin a staging buffer: " + cudaGetErrorString(cudaGetLastError()),
                  "pin the ring up front (bench-load --pin alloc) or free host memory");
    TPS_CUDA_CHECK(cudaMemcpyAsync(base + dst, src, n, cudaMemcpyHostToDevice, streams_[size_t(reader)]));
  }
  void release_staging(int reader, size_t i) override {
    TPS_CUDA_CHECK(cudaEventRecord(events_[i], streams_[size_t(reader)]));
  }
  void wait_staging(size_t i) override { TPS_CUDA_CHECK(cudaEventSynchronize(events_[i])); }
  void interleave_planes(int reader, uint64_t raw_bytes, uint64_t dst) override {
    cudaStream_t s = streams_[size_t(reader)];
    interleave_byte_planes(static_cast<const uint8_t*>(scratch_), arena_ + dst, size_t(raw_bytes / 2), s);
    TPS_CUDA_CHECK(cudaStreamSynchronize(s));  // the scratch is free again after this
  }
  void finish_reader(int reader) override {
    const cudaError_t e = cudaStreamSynchronize(streams_[size_t(reader)]);
    if (e != cudaSuccess)
      throw Error(path_ + ": copy to the device failed: " + cudaGetErrorString(e), cuda_hint(e));
  }

 private:
  /// cudaHostRegister of staging buffer i (RegisterLazy); false when refused.
  bool register_buffer(size_t i) {
    if (cudaHostRegister(staging(i), bytes_, cudaHostRegisterDefault) != cudaSuccess) return false;
    pinned_[i] = 1;
    return true;
  }

  uint8_t* arena_;
  uint64_t arena_bytes_;
  load::RingPinning pinning_;
  std::string path_;
  int device_ = 0;
  uint8_t* base_ = nullptr;
  size_t count_ = 0, bytes_ = 0;
  std::vector<uint8_t> pinned_;  ///< RegisterLazy: per buffer, registered yet
  std::vector<cudaEvent_t> events_;
  std::vector<cudaStream_t> streams_;
  void* scratch_ = nullptr;
  uint64_t scratch_bytes_ = 0;
};

}  // namespace

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
    // Zero the padding between tensors so the arena equals the data section byte for byte: the gaps
    // only (zeroing all of it first costs 4 ms per 13.5 GB on an H100), on the legacy stream, which the
    // loader's non-blocking streams do not wait for (they write elsewhere); synchronized after the load.
    std::vector<std::pair<uint64_t, uint64_t>> spans;  // [offset, end) of each tensor
    for (const auto& t : shard.tensors()) spans.emplace_back(t.arena_offset, t.arena_offset + t.raw_bytes);
    std::sort(spans.begin(), spans.end());
    uint64_t zeroed_to = 0;
    auto* bytes = static_cast<uint8_t*>(base_);
    for (const auto& [begin, end] : spans) {
      if (begin > zeroed_to) TPS_CUDA_CHECK(cudaMemsetAsync(bytes + zeroed_to, 0, std::min(begin, need) - zeroed_to, 0));
      zeroed_to = std::min(std::max(zeroed_to, end), need);
    }
    if (zeroed_to < need) TPS_CUDA_CHECK(cudaMemsetAsync(bytes + zeroed_to, 0, need - zeroed_to, 0));
  }
  bytes_ = need;
  rep.setup_seconds = seconds_since(t_alloc);
  try {
    DeviceTarget target(static_cast<uint8_t*>(base_), need, opts.pinning, path_);
    load::stream_shard(shard, opts, target, rep);
    TPS_CUDA_CHECK(cudaDeviceSynchronize());  // the padding's memsets
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
