// gemv.cuh: the decode-path linear layer for 1..8 tokens: y = x W^T with the bias, the beta-accumulate
// and the MLP activation (plain or gated) fused, bounded by reading W once from HBM. Launched with PDL
// (kernels/pdl.cuh) so its first weight loads overlap the previous kernel's tail.
// Does not own: larger n or unsupported shapes (kernels/gemm.cuh cuBLASLt + bias_add / activation).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "format/dtype.h"
#include "model/model_config.h"

namespace tpshard::cuda {

enum class GemvEpilogue {
  None,      ///< y = acc + b (+ beta * y_old)
  Act,       ///< y = act(acc + b)
  GatedAct,  ///< y = act(gate + b_gate) * (up + b_up), W holds 2*out rows (gate rows, then up rows)
};

/// How the decode GEMV streams its weights (kernels/gemv_row.cuh). Every setting gives bit-identical
/// results; bench_kernels --only gemv_sweep times them (docs/BENCHMARKS.md "Tried and dropped").
struct GemvTuning {
  int fifo_depth = -1;      ///< 16-byte chunks in flight per lane (shared-memory FIFO): 4, 8 or 16; 0 = register
                            ///< batches (fastest for a GEMV that follows a GEMV); -1 = the default, 0
  int warps_per_block = 0;  ///< 2, 4 or 8 warps per block; 0 = the default, 4
  /// 1, 2 or 4 warps share one output row (split-K: each streams a contiguous share of the row, the
  /// block adds the shares in warp order), at most warps_per_block; 2 and 4 only for n <= 2 and
  /// fifo_depth 0 or 4 (the decode buckets); 0 = auto (gemv_auto_warps_per_row; 1 where 2 / 4 are not built).
  /// Results differ between values by rounding only; tunings with the same value agree bit for bit.
  int warps_per_row = 0;
};

/// The warps per row that warps_per_row = 0 picks for a launch of `rows` output rows (the pair: both
/// products' rows) on a GPU of `sms` multiprocessors, streaming with FIFO depth `fifo_depth` (0:
/// register batches): the fewest of 1, 2, 4 that give at least kGemvTargetWarpsPerSm warps per SM,
/// else 4; register batches take at least 2. Measured on H200 (docs/BENCHMARKS.md "Tried and dropped"):
/// - few long rows (GPT-NeoX's combined output GEMV: 2,048 rows of 20 KiB for Pythia-1.4B) leave too
///   few loads in flight per SM with one warp per row;
/// - register batches keep one batch per warp in flight, and 2 warps per row halve each row's chain of
///   dependent batches: faster end to end on every tp 1 shape (Pythia-1.4B 0.954 -> 0.854 ms, Llama-7B
///   3.956 -> 3.899 ms), while 4 was slower per layer (gemv_sweep);
/// - the FIFO (tp > 1) already keeps D chunks per lane in flight: 2 warps per row everywhere was slower
///   there (Llama-7B tp 2 2.321 -> 2.531 ms).
int gemv_auto_warps_per_row(int rows, int sms, int fifo_depth);
constexpr int kGemvTargetWarpsPerSm = 24;

/// The tuning the transformer's decode GEMVs use on a rank of a tp_size-way model: the FIFO (depth 4,
/// 4 warps) when tp_size > 1, register batches of 4 warps at tp_size 1, warps per row auto. With tp > 1
/// every layer waits twice for the peers in its all_reduces, and the FIFO requests the next GEMV's
/// weights during those waits; at tp 1 the register batches stream faster (measured end to end,
/// docs/BENCHMARKS.md "Tried and dropped"). The other tunings are timed by bench_kernels --only gemv_sweep.
GemvTuning gemv_tuning_for(int tp_size);

struct GemvArgs {
  const void* x = nullptr;    ///< [n, in] row-major of dtype, device, 16-byte aligned
  const void* w = nullptr;    ///< [rows, in] row-major of dtype, 16-byte aligned; rows = out, or 2*out for
                              ///< GatedAct (gate rows 0..out-1, then up rows out..2out-1: ffn_gate_up)
  void* y = nullptr;          ///< [n, out] row-major of out_dtype; must not overlap x or w
  const void* bias = nullptr; ///< optional [rows] of dtype, added to the fp32 accumulator before the epilogue
  int n = 0;                  ///< tokens, 1..kGemvMaxTokens
  int out = 0;                ///< output features
  int in = 0;                 ///< input features, a multiple of 8 (f16/bf16) or 4 (f32)
  DType dtype = DType::F16;      ///< of x, w and bias: F16, BF16 or F32
  DType out_dtype = DType::F16;  ///< dtype, or F32 (logits)
  float beta = 0.f;              ///< None only: y = acc + b + beta * y_old (beta 0: y_old is not read)
  GemvEpilogue epilogue = GemvEpilogue::None;
  /// Optional second input segment (None epilogue only): y = x W^T + x2 W2^T (+ b + beta y_old), with
  /// x2 [n, in2] and w2 [out, in2] of dtype, 16-byte aligned, in2 a multiple of the vector width. One
  /// launch for two row-parallel products that add up (GPT-NeoX parallel residual: attention output
  /// projection + MLP down).
  const void* x2 = nullptr;
  const void* w2 = nullptr;
  int in2 = 0;
  /// With x2 only: x2 was complete before the PREVIOUS kernel on the stream passed its griddep_wait()
  /// (it was written two or more launches back, and the kernels in between wait before they trigger
  /// their dependents, as all of ours do). The GEMV then streams the x2 W2^T segment before its own
  /// griddep_wait(), overlapping the previous kernel, and x W^T after it. The sum runs over the x2
  /// segment first, so results differ from x2_early = false by rounding (every tuning still agrees
  /// bit for bit). GPT-NeoX decode: the MLP down half of the combined product runs during attention.
  bool x2_early = false;
  /// Optional device int32, written by an earlier kernel on the stream: when it reads 0 the launch
  /// writes nothing and streams no weights (kernels/moe_block.cuh: an expert without tokens in this
  /// decode step). The check waits for the previous kernel first, so such a launch loses the weight
  /// prefetch before griddep_wait(). gemv() only; linear()'s cuBLASLt path ignores it.
  const int32_t* skip_if_zero = nullptr;
  Activation act = Activation::Silu;  ///< for Act / GatedAct (kernels/activation_fn.cuh definitions)
  GemvTuning tuning;                  ///< weight streaming; gemv_pair uses a0's
};

/// The largest n gemv() takes (decode graph buckets 1, 2, 4, 8).
constexpr int kGemvMaxTokens = 8;

/// Why gemv() cannot take these arguments, or nullptr when it can: 1 <= n <= kGemvMaxTokens, 1 <= out <= 2^30,
/// in >= 1 and a multiple of the vector width (8 elements for f16/bf16, 4 for f32), x/w/y non-null,
/// x and w 16-byte aligned, out_dtype == dtype or F32, beta == 0 unless the epilogue is None, tuning
/// values among those GemvTuning lists (warps_per_row <= warps_per_block when both are set), x2_early only with x2.
const char* gemv_unsupported_reason(const GemvArgs& a);

/// True when gemv() handles these arguments (gemv_unsupported_reason(a) == nullptr). The caller falls
/// back to cuBLASLt + separate epilogue kernels otherwise.
bool gemv_supported(const GemvArgs& a);

/// Enqueue y = epilogue(x W^T + b) on stream, launched with launch_pdl (capturable in CUDA graphs).
/// fp32 accumulation; bias, beta * y_old and the activation in fp32; ONE rounding to out_dtype at the
/// end (cuBLASLt + bias_add/activation round twice: results differ from that path by about 1 ulp).
/// tuning.warps_per_row warps per output row (GatedAct: the gate and up rows of one output), 16-byte weight chunks, the
/// first fifo_depth x 512 bytes of each row requested before griddep_wait(); nothing is read from x / y
/// or written before it.
/// Throws Error when !gemv_supported(a) or the launch fails.
void gemv(const GemvArgs& a, cudaStream_t stream);

/// Why gemv_pair() cannot take (a0, a1), or nullptr: each must be gemv_supported, a0 with the None
/// epilogue and a1 with Act, same dtype and n, n <= 2, no second segments, no skip_if_zero.
const char* gemv_pair_unsupported_reason(const GemvArgs& a0, const GemvArgs& a1);

/// a0 and a1 (independent: neither reads the other's y) in ONE launch: the grid's first blocks compute
/// a0, the rest a1. For the GPT-NeoX parallel residual at decode: QKV (+bias) and MLP up (+bias, act)
/// both read the same normalized hidden state. Results as gemv(a0); gemv(a1). Throws Error when
/// gemv_pair_unsupported_reason is non-null or the launch fails.
void gemv_pair(const GemvArgs& a0, const GemvArgs& a1, cudaStream_t stream);

}  // namespace tpshard::cuda
