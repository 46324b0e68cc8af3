// cpu_session.h: the CPU backend's session: tp_size threads of this process, each with its own shard and
// a thread communicator. runtime/session.h dispatches Device::Cpu here.
#pragma once
#include <functional>

#include "runtime/session_types.h"

namespace tpshard::cpu {

/// Load the manifest, start tp_size threads (rank 0 on the calling thread), each opening only its own
/// shard and building a ThreadComm + ThreadPool + CPU runner, then call fn(ctx) on each concurrently.
/// A failure on one rank aborts the thread group, so ranks blocked in a collective wake up instead of
/// deadlocking; the first error is rethrown here. Throws Error for opts.nnodes != 1.
void run_cpu_session(const SessionOptions& opts, const std::function<void(RankContext&)>& fn);

}  // namespace tpshard::cpu
