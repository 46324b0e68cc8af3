// gemv_sweep.h: bench_kernels --only gemv_sweep: the decode GEMV's weight-streaming tunings
// (GemvTuning: FIFO depth x warps per block) timed on whole decode layers.
#pragma once

namespace tpshard::cuda {

/// Print one markdown table: for Pythia-1.4B (f16) and Llama-7B (bf16, tp 1 and tp 2 shards) decode
/// layers at 1 and 2 tokens, the GEMVs of a layer back to back as the transformer launches them (the
/// parallel-residual pair + the two-segment product; qkv, o, gate_up, down), alone and with busy
/// stand-ins (tools/bench_kernels/busy_kernel.h) where attention and the norms run, over enough layer
/// copies (>= 1 GiB) that L2 holds none of them; us per layer and GEMV bandwidth against the copy
/// bandwidth, for every tuning; then, per layer, the three best assignments of {registers, FIFO 4x4,
/// FIFO 8x8} to its GEMV launches (1 token, busy stand-ins). Uses GPU 0.
void bench_gemv_sweep();

}  // namespace tpshard::cuda
