// shard_stream.h: stream one rank's shard file into its weight memory (a LoadTarget) with every byte's
// hash checked on the way. Reader threads take whole tensors, largest first; per chunk a thread reads
// into a free staging buffer (pread, or io_uring with several reads in flight for O_DIRECT) -> XXH3 with
// its own running state -> the target's copy (asynchronous for a device) -> the buffer is reused after
// that copy. Threads never wait for each other (each tensor's hash is one thread's), so reads, hashes
// and copies of different tensors overlap; the largest tensors start first so that none is left alone
// at the end. zstd tensors: one reader decompresses the whole tensor through staging buffers;
// byte-plane tensors go through the target's scratch and are interleaved there.
#pragma once
#include "format/shard_file.h"
#include "runtime/load/load_options.h"
#include "runtime/load/load_target.h"

namespace tpshard::load {

/// Fill `target` with the shard's data section: weights byte i = data-section byte i for uncompressed
/// tensors, decompressed bytes for the others (the caller zeroes the padding). Fills `report` (seconds
/// excluded: the caller times its own allocation too). Throws Error naming the file and the tensor on a
/// hash mismatch, a short read, a corrupt record or frame, or O_DIRECT refused by the file system;
/// whatever the target received is then incomplete.
void stream_shard(const ShardReader& shard, const LoadOptions& opts, LoadTarget& target, LoadReport& report);

}  // namespace tpshard::load
