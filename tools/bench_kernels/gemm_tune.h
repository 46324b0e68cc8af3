// gemm_tune.h: bench_kernels --only gemm_tune: cuBLASLt's first heuristic choice against the fastest of
// its first Gemm::kAutotuneAlgos candidates (Gemm::set_autotune_max_rows) on the linear layers of
// batched decode steps.
#pragma once

namespace tpshard::cuda {

/// Print one markdown table: for the linear layers of Pythia-1.4B (f16), Llama-7B (bf16) and
/// GPT-NeoX-20B (f16, tp 1) at 8..128 tokens, us per product with the heuristic's algorithm and with the
/// autotuned one, both as GB/s of weights and % of the device copy bandwidth; weights rotate over
/// enough copies (>= 512 MiB) that L2 holds none of them; calls replayed in a CUDA graph. Uses GPU 0.
void bench_gemm_tune();

}  // namespace tpshard::cuda
