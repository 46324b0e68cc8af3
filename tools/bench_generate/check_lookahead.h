// check_lookahead.h: bench_generate --check-lookahead: the CUDA runner's decode lookahead
// (runtime/cuda/cuda_runner.cpp) gives exactly the results of the same runner without it, over a script
// that hits every path: steps taken from the lookahead, rows dropping out (a subset of the ahead step),
// a fed token that is not the returned argmax (mismatch), a prefill between decode steps, a step that
// asks for logits, and last_step hints.
#pragma once
#include <functional>
#include <string>

#include "model/manifest.h"
#include "runtime/comm.h"
#include "runtime/cuda/weight_arena.h"

namespace tpshard {

/// Runs the script twice on rank `rank` of `tp_size` (lookahead off, then on; each runner destroyed before
/// the next is made), prints PASS/FAIL lines through `say`, returns the number of failures. SPMD: every
/// rank calls it with the same arguments.
int check_lookahead(const Manifest& m, int rank, int tp_size, const cuda::WeightArena& arena, Communicator& comm,
                    const std::function<void(const std::string&)>& say);

}  // namespace tpshard
