// host_target.cpp: HostLoadTarget (load_target.h).
#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "format/error.h"
#include "runtime/load/chunk_reader.h"
#include "runtime/load/load_target.h"

namespace tpshard::load {

HostLoadTarget::HostLoadTarget(uint8_t* weights, uint64_t weights_bytes)
    : weights_(weights), weights_bytes_(weights_bytes) {}

HostLoadTarget::~HostLoadTarget() { std::free(staging_); }

void HostLoadTarget::prepare(size_t count, size_t bytes, int, uint64_t scratch_bytes) {
  std::free(staging_);
  const size_t total = (count * bytes + kPage - 1) / kPage * kPage;
  staging_ = static_cast<uint8_t*>(std::aligned_alloc(kPage, total));
  if (!staging_)
    throw Error("loader: out of host memory for " + std::to_string(total >> 20) + " MiB of staging buffers",
                "free host memory or pass smaller ring buffers");
  count_ = count;
  buffer_bytes_ = bytes;
  scratch_.assign(size_t(scratch_bytes), 0);
}

void HostLoadTarget::copy(int, size_t, const uint8_t* src, size_t n, uint64_t dst, bool to_scratch) {
  const uint64_t limit = to_scratch ? scratch_.size() : weights_bytes_;
  if (dst > limit || n > limit - dst)
    throw Error("loader: copy of " + std::to_string(n) + " bytes at " + std::to_string(dst) +
                    " exceeds the " + (to_scratch ? "scratch" : "weights") + " (" + std::to_string(limit) +
                    " bytes)",
                "this is a bug in the loader");
  std::memcpy((to_scratch ? scratch_.data() : weights_) + dst, src, n);
}

void HostLoadTarget::interleave_planes(int, uint64_t raw_bytes, uint64_t dst) {
  const size_t n = size_t(raw_bytes / 2);
  if (raw_bytes > scratch_.size() || dst > weights_bytes_ || raw_bytes > weights_bytes_ - dst)
    throw Error("loader: byte planes of " + std::to_string(raw_bytes) + " bytes do not fit",
                "this is a bug in the loader");
  uint8_t* out = weights_ + dst;
  for (size_t i = 0; i < n; ++i) {
    out[2 * i] = scratch_[i];
    out[2 * i + 1] = scratch_[n + i];
  }
}

}  // namespace tpshard::load
