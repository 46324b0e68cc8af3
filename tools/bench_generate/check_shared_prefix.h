// check_shared_prefix.h: bench_generate --check-shared-prefix, two checks of what prefill chunks can ask
// of the CUDA runner: (1) sequences that read a shared prompt prefix from another kv_cache slot
// (SeqChunk::prefix_slot) get the results of sequences holding the whole prompt themselves: prefill
// logits, then greedy decode steps (graphs and lookahead as configured) with a logits step among them,
// shared and unshared rows in the same steps; (2) a chunk with all_logits returns, for every token, the
// logits that the last-position path gives for that prefix (rows spread over several steps).
#pragma once
#include <functional>
#include <string>

#include "model/manifest.h"
#include "runtime/comm.h"
#include "runtime/cuda/cuda_runner.h"
#include "runtime/cuda/weight_arena.h"

namespace tpshard {

/// Runs both checks on rank `rank` of `tp_size` with runner options `o` (max_batch and max_seq_len are
/// set here), prints three PASS/FAIL lines through `say` (logits: |a - b| <= atol), returns the number
/// of failures. SPMD: every rank calls it with the same arguments.
int check_shared_prefix(const Manifest& m, int rank, int tp_size, const cuda::WeightArena& arena, Communicator& comm,
                        cuda::CudaRunnerOptions o, double atol, const std::function<void(const std::string&)>& say);

}  // namespace tpshard
