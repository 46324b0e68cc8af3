// peer_kernels.h: the PeerCommunicator's collective kernels over CustomAllReduce's peer-mapped regions
// (same flag/epoch protocol as the one-shot all_reduce, see custom_all_reduce.cu): an all_reduce of any
// alignment and element count, and one gather kernel for all_gather, broadcast and barrier. Each launch
// handles at most data_bytes of message per rank (the caller splits longer messages into several calls).
// Does not own: chunking, checks of the arguments, the regions (peer_comm.cpp, custom_all_reduce.h).
#pragma once
#include <cuda_runtime.h>

#include <cstddef>

#include "format/dtype.h"
#include "runtime/cuda/custom_all_reduce.h"

namespace tpshard::cuda {

/// In-place sum over ranks of `count` elements of dtype (F32/F16/BF16) at device pointer buf, on
/// `stream`: fp32 sum in rank order 0..size-1, rounded once (bitwise identical on all ranks; the same
/// bits as CustomAllReduce::all_reduce_sum). count * dtype_size <= r.data_bytes; buf aligned to the
/// element size; any count (16-byte aligned buffers take 16-byte loads, the rest element by element).
/// One kernel, kBlocks x kThreads, PDL launch; launched even for count 0 (a handshake). Capturable.
cudaError_t launch_peer_all_reduce(const PeerRegions& r, void* buf, size_t count, DType dtype, cudaStream_t stream);

/// One kernel of the same protocol moving bytes (bytes <= r.data_bytes; any alignment):
///   root < 0 (all_gather): recv[q * recv_stride + i] = send of rank q [i], for every rank q, i < bytes;
///   root >= 0 (broadcast): recv[i] = send of rank root [i] on every rank but root (root copies nothing
///   out; send may equal recv).
/// bytes 0 is a pure handshake of all ranks (barrier). Capturable.
cudaError_t launch_peer_gather(const PeerRegions& r, const void* send, void* recv, size_t bytes, size_t recv_stride,
                               int root, cudaStream_t stream);

}  // namespace tpshard::cuda
