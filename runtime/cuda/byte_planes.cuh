// byte_planes.cuh: the one kernel of the loader: undo Codec::ZstdBytePlanes (format/shard_file.h) on
// the device after the planes were decompressed and copied up.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace tpshard::cuda {

/// planes = [low bytes of n 2-byte elements | high bytes of them] (2n bytes, device);
/// dst[2i] = planes[i], dst[2i+1] = planes[n + i] (2n bytes, device, must not overlap planes).
/// Enqueued on stream; checks the launch (throws Error).
void interleave_byte_planes(const uint8_t* planes, uint8_t* dst, size_t n, cudaStream_t stream);

}  // namespace tpshard::cuda
