// linear.cu: GEMV or cuBLASLt + epilogue kernels (see linear.cuh).
#include "kernels/activation.cuh"
#include "kernels/bias_add.cuh"
#include "kernels/common.cuh"
#include "kernels/linear.cuh"

namespace tpshard::cuda {

size_t linear_scratch_elems(const GemvArgs& a) {
  const size_t rows = a.epilogue == GemvEpilogue::GatedAct ? 2 * static_cast<size_t>(a.out)
                      : a.epilogue == GemvEpilogue::Act   ? static_cast<size_t>(a.out)
                                                          : 0;
  return static_cast<size_t>(a.n) * rows;
}

void linear(const GemvArgs& a, Gemm& gemm, void* scratch, bool use_gemv, cudaStream_t stream) {
  if (use_gemv && a.n <= kLinearGemvMaxTokens && gemv_supported(a)) {
    gemv(a, stream);
    return;
  }
  const bool act = a.epilogue != GemvEpilogue::None;
  TPS_CHECK(!act || scratch, "kernels/linear: the cuBLASLt path of an activation epilogue needs a scratch buffer",
            "pass scratch of linear_scratch_elems(args) elements");
  TPS_CHECK(!a.bias || act || a.beta == 0.f, "kernels/linear: bias with beta != 0 is not supported on the cuBLASLt path",
            "add the bias in the following norm (as the transformer does) or use beta 0");
  const int rows = a.epilogue == GemvEpilogue::GatedAct ? 2 * a.out : a.out;
  GemmArgs g;
  g.x = a.x;
  g.w = a.w;
  g.y = act ? scratch : a.y;
  g.n = a.n;
  g.out = rows;
  g.in = a.in;
  g.in_dtype = a.dtype;
  g.out_dtype = act ? a.dtype : a.out_dtype;
  g.beta = act ? 0.f : a.beta;
  gemm.linear(g, stream);
  if (!act) {
    if (a.bias) bias_add(a.y, a.bias, a.n, rows, a.dtype, stream, a.out_dtype);
    return;
  }
  ActivationParams p;
  p.in = scratch;
  p.bias = a.bias;
  p.out = a.y;
  p.dtype = a.dtype;
  p.act = a.act;
  p.gated = a.epilogue == GemvEpilogue::GatedAct;
  p.n = a.n;
  p.width = a.out;
  activation(p, stream);
}

}  // namespace tpshard::cuda
