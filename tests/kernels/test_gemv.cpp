// test_gemv.cpp: the decode GEMV (kernels/gemv.cuh) against ref::linear + ref::activation: every dtype,
// n 1..8, awkward in/out (vector and unroll tails, out not a multiple of the block's warps), every
// epilogue, f32 logits; the real Pythia-1.4B / Llama-7B shapes at n 1 (timed against cuBLASLt, HBM-sized
// working sets); PDL chains where each GEMV reads the previous one's output; split-K rows (1, 2, 4 warps
// per row) against one warp per row; skip_if_zero; gemv_supported() limits.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <string>
#include <utility>

#include "format/error.h"
#include "kernels/gemm.cuh"
#include "kernels/gemv.cuh"
#include "tests/kernels/test_util.h"
#include "tests/reference/reference.h"

using namespace tpshard;
using namespace tpshard::test;

namespace {

/// A non-blocking stream, so consecutive PDL launches may really overlap (not the legacy stream).
struct Stream {
  cudaStream_t s = nullptr;
  Stream() { REQUIRE(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess); }
  ~Stream() { cudaStreamDestroy(s); }
};

/// Uniform weights in +-sqrt(3 / in): each output has variance ~1/3 for x in [-1, 1), so results are
/// O(1) at every `in` and the dtype tolerances of tol_for() apply unscaled.
Vec random_weights(size_t count, int in, DType t, std::mt19937& rng) {
  const double a = std::sqrt(3.0 / in);
  return random_vec(count, -a, a, t, rng);
}

/// Columns [begin, begin + width) of m [n, cols].
Vec columns(const Vec& m, int n, int cols, int begin, int width) {
  Vec r(static_cast<size_t>(n) * width);
  for (int t = 0; t < n; ++t)
    for (int o = 0; o < width; ++o) r[static_cast<size_t>(t) * width + o] = m[static_cast<size_t>(t) * cols + begin + o];
  return r;
}

/// Runs gemv with y initialised to y0 (uploaded in a.out_dtype) and returns y.
Vec run_gemv(cuda::GemvArgs a, const Vec& y0, cudaStream_t stream) {
  Buf d_y = upload(y0, a.out_dtype);
  a.y = d_y->ptr;
  REQUIRE(cuda::gemv_supported(a));
  cuda::gemv(a, stream);
  return download(d_y->ptr, y0.size(), a.out_dtype);
}

const char* act_name(Activation act) {
  switch (act) {
    case Activation::Gelu: return "gelu";
    case Activation::GeluTanh: return "gelu_tanh";
    case Activation::Silu: return "silu";
    case Activation::Relu: return "relu";
  }
  return "?";
}

std::string shape_name(DType t, int n, int out, int in) {
  return std::string(name_of(t)) + " n " + std::to_string(n) + " out " + std::to_string(out) + " in " + std::to_string(in);
}

/// Milliseconds per call of f(i), i = 0..iters-1 (after 3 warm-up calls), timed with events on stream.
template <typename F>
double time_ms(F f, int iters, cudaStream_t stream) {
  for (int i = 0; i < 3; ++i) f(i);
  cudaEvent_t e0, e1;
  REQUIRE(cudaEventCreate(&e0) == cudaSuccess);
  REQUIRE(cudaEventCreate(&e1) == cudaSuccess);
  REQUIRE(cudaEventRecord(e0, stream) == cudaSuccess);
  for (int i = 0; i < iters; ++i) f(i);
  REQUIRE(cudaEventRecord(e1, stream) == cudaSuccess);
  REQUIRE(cudaEventSynchronize(e1) == cudaSuccess);
  float ms = 0;
  REQUIRE(cudaEventElapsedTime(&ms, e0, e1) == cudaSuccess);
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  return ms / iters;
}

/// y [n, out] = x [n, in] W^T of dtype t (None epilogue, no bias): the fields every test sets.
cuda::GemvArgs product(const void* x, const void* w, void* y, int n, int out, int in, DType t) {
  cuda::GemvArgs a;
  a.x = x;
  a.w = w;
  a.y = y;
  a.n = n;
  a.out = out;
  a.in = in;
  a.dtype = a.out_dtype = t;
  return a;
}

/// The GPT-NeoX decode pair as the transformer builds it: a0 = x0 W0^T + b0 (None) into y0, a1 =
/// gelu(x1 W1^T + b1) (Act) into y1; n tokens, `in` inputs, dtype t.
std::pair<cuda::GemvArgs, cuda::GemvArgs> qkv_up_pair(const void* x0, const void* w0, const void* b0, void* y0, int out0,
                                                      const void* x1, const void* w1, const void* b1, void* y1, int out1,
                                                      int n, int in, DType t) {
  cuda::GemvArgs a0 = product(x0, w0, y0, n, out0, in, t);
  a0.bias = b0;
  cuda::GemvArgs a1 = product(x1, w1, y1, n, out1, in, t);
  a1.bias = b1;
  a1.epilogue = cuda::GemvEpilogue::Act;
  a1.act = Activation::Gelu;
  return {a0, a1};
}

/// Supported f16 arguments over 16-byte aligned HOST memory (1 token, 4 x 16): for the host-only tests
/// of gemv_supported(), which check pointers and never launch.
cuda::GemvArgs host_args() {
  static uint4 buf[64];
  cuda::GemvArgs a;
  a.x = a.w = buf;
  a.y = buf;
  a.n = 1;
  a.out = 4;
  a.in = 16;
  a.dtype = a.out_dtype = DType::F16;
  return a;
}

}  // namespace

TEST_CASE("gemv: every epilogue over dtypes, n 1..8 and awkward shapes") {
  std::mt19937 rng(11);
  Stream stream;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const Activation cycle[] = {Activation::GeluTanh, Activation::Relu, Activation::Silu, Activation::Gelu};
  int case_index = 0;
  for (DType t : {DType::F32, DType::F16, DType::BF16}) {
    std::vector<int> ins = {8, 40, 136, 2056, 4104};
    if (t == DType::F32) ins.insert(ins.begin(), {4, 12});  // f32 vectors are 4 wide
    for (int in : ins) {
      for (int out : {1, 3, 33, 2050}) {
        // 2*out rows: the gated cases use all of them (gate | up); None / Act use the first `out`.
        const Vec w = random_weights(static_cast<size_t>(2) * out * in, in, t, rng);
        const Vec bias = random_vec(static_cast<size_t>(2) * out, -0.5, 0.5, t, rng);
        const Vec bias_out(bias.begin(), bias.begin() + out);
        Buf d_w = upload(w, t), d_bias = upload(bias, t);
        for (int n = 1; n <= cuda::kGemvMaxTokens; ++n) {
          const Vec x = random_vec(static_cast<size_t>(n) * in, -1, 1, t, rng);
          Buf d_x = upload(x, t);
          const Vec full = ref::linear(x, w, {}, 0, n, 2 * out, in);  // [n, 2*out]
          const Vec acc = columns(full, n, 2 * out, 0, out);          // rows 0..out-1 only
          const std::string shape = shape_name(t, n, out, in);
          const Vec y_nan(static_cast<size_t>(n) * out, nan);  // beta 0 must not read y_old
          cuda::GemvArgs a;
          a.x = d_x->ptr;
          a.w = d_w->ptr;
          a.n = n;
          a.out = out;
          a.in = in;
          a.dtype = t;
          a.out_dtype = t;
          ++case_index;

          // None, no bias, beta 0
          check_close("gemv none " + shape, run_gemv(a, y_nan, stream.s), acc, tol_for(t));

          // None, bias, beta 1 (GPT-NeoX parallel residual accumulate)
          {
            cuda::GemvArgs b = a;
            b.bias = d_bias->ptr;
            b.beta = 1.f;
            const Vec y0 = random_vec(static_cast<size_t>(n) * out, -1, 1, t, rng);
            Vec ref = acc;
            for (int k = 0; k < n; ++k)
              for (int o = 0; o < out; ++o) ref[static_cast<size_t>(k) * out + o] += bias[o] + y0[static_cast<size_t>(k) * out + o];
            check_close("gemv none bias beta 1 " + shape, run_gemv(b, y0, stream.s), ref, tol_for(t));
          }

          // None, f32 output (logits): bias on odd n; beta 0.5 when out == 33 (beta scales y_old)
          {
            cuda::GemvArgs b = a;
            b.out_dtype = DType::F32;
            const bool with_bias = n % 2 == 1;
            if (with_bias) b.bias = d_bias->ptr;
            b.beta = out == 33 ? 0.5f : 0.f;
            const Vec y0 = b.beta != 0.f ? random_vec(static_cast<size_t>(n) * out, -1, 1, DType::F32, rng) : y_nan;
            Vec ref = acc;
            for (int k = 0; k < n; ++k)
              for (int o = 0; o < out; ++o) {
                const size_t i = static_cast<size_t>(k) * out + o;
                if (with_bias) ref[i] += bias[o];
                if (b.beta != 0.f) ref[i] += 0.5 * y0[i];
              }
            check_close("gemv none ->f32 " + shape, run_gemv(b, y0, stream.s), ref, tol_for(DType::F32));
          }

          // Act gelu with bias (GPT-NeoX MLP up)
          {
            cuda::GemvArgs b = a;
            b.bias = d_bias->ptr;
            b.epilogue = cuda::GemvEpilogue::Act;
            b.act = Activation::Gelu;
            check_close("gemv act gelu bias " + shape, run_gemv(b, y_nan, stream.s),
                        ref::activation(acc, bias_out, Activation::Gelu, false, n, out), tol_for(t));
          }

          // Act, the other activations in turn, no bias
          {
            cuda::GemvArgs b = a;
            b.epilogue = cuda::GemvEpilogue::Act;
            b.act = cycle[case_index % 4];
            check_close(std::string("gemv act ") + act_name(b.act) + " " + shape, run_gemv(b, y_nan, stream.s),
                        ref::activation(acc, {}, b.act, false, n, out), tol_for(t));
          }

          // GatedAct silu (Llama SwiGLU), without and with bias; gelu_tanh gated on every 4th case
          for (bool with_bias : {false, true}) {
            cuda::GemvArgs b = a;
            b.epilogue = cuda::GemvEpilogue::GatedAct;
            b.act = (with_bias && case_index % 4 == 0) ? Activation::GeluTanh : Activation::Silu;
            if (with_bias) b.bias = d_bias->ptr;
            check_close(std::string("gemv gated ") + act_name(b.act) + (with_bias ? " bias " : " ") + shape,
                        run_gemv(b, y_nan, stream.s),
                        ref::activation(full, with_bias ? bias : Vec{}, b.act, true, n, out), tol_for(t));
          }
        }
      }
    }
  }
}

TEST_CASE("gemv: real decode shapes at n 1 (Pythia-1.4B, Llama-7B tp 1/2), timed against cuBLASLt") {
  struct Shape {
    const char* name;
    DType t;
    int out, in;
    cuda::GemvEpilogue epilogue;
    bool bias;
    float beta;
    DType out_t;
  };
  const Shape shapes[] = {
      {"pythia qkv", DType::F16, 6144, 2048, cuda::GemvEpilogue::None, true, 0.f, DType::F16},
      {"pythia dense", DType::F16, 2048, 2048, cuda::GemvEpilogue::None, false, 0.f, DType::F16},
      {"pythia up+gelu", DType::F16, 8192, 2048, cuda::GemvEpilogue::Act, true, 0.f, DType::F16},
      {"pythia down beta 1", DType::F16, 2048, 8192, cuda::GemvEpilogue::None, false, 1.f, DType::F16},
      {"pythia lm head", DType::F16, 50304, 2048, cuda::GemvEpilogue::None, false, 0.f, DType::F32},
      {"llama qkv", DType::BF16, 12288, 4096, cuda::GemvEpilogue::None, false, 0.f, DType::BF16},
      {"llama gate_up silu", DType::BF16, 11008, 4096, cuda::GemvEpilogue::GatedAct, false, 0.f, DType::BF16},
      {"llama down", DType::BF16, 4096, 11008, cuda::GemvEpilogue::None, false, 0.f, DType::BF16},
      {"llama tp2 gate_up silu", DType::BF16, 5504, 4096, cuda::GemvEpilogue::GatedAct, false, 0.f, DType::BF16},
      {"llama tp2 down", DType::BF16, 4096, 5504, cuda::GemvEpilogue::None, false, 0.f, DType::BF16},
      {"llama tp2 lm head", DType::BF16, 16000, 4096, cuda::GemvEpilogue::None, false, 0.f, DType::F32},
  };
  std::mt19937 rng(12);
  Stream stream;
  cuda::Gemm gemm;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (const Shape& s : shapes) {
    const bool gated = s.epilogue == cuda::GemvEpilogue::GatedAct;
    const int rows = gated ? 2 * s.out : s.out;
    const Vec w = random_weights(static_cast<size_t>(rows) * s.in, s.in, s.t, rng);
    const Vec bias = random_vec(rows, -0.5, 0.5, s.t, rng);
    const Vec x = random_vec(s.in, -1, 1, s.t, rng);
    const Vec y0 = s.beta != 0.f ? random_vec(s.out, -1, 1, s.out_t, rng) : Vec(s.out, nan);
    Buf d_w = upload(w, s.t), d_x = upload(x, s.t), d_bias = upload(bias, s.t);
    cuda::GemvArgs a;
    a.x = d_x->ptr;
    a.w = d_w->ptr;
    a.bias = s.bias ? d_bias->ptr : nullptr;
    a.n = 1;
    a.out = s.out;
    a.in = s.in;
    a.dtype = s.t;
    a.out_dtype = s.out_t;
    a.beta = s.beta;
    a.epilogue = s.epilogue;
    a.act = s.epilogue == cuda::GemvEpilogue::Act ? Activation::Gelu : Activation::Silu;

    const Vec full = ref::linear(x, w, s.beta != 0.f ? y0 : Vec{}, s.beta, 1, rows, s.in);
    Vec ref;
    if (gated) {
      ref = ref::activation(full, s.bias ? bias : Vec{}, Activation::Silu, true, 1, s.out);
    } else if (s.epilogue == cuda::GemvEpilogue::Act) {
      ref = ref::activation(full, s.bias ? bias : Vec{}, Activation::Gelu, false, 1, s.out);
    } else {
      ref = full;
      if (s.bias)
        for (int o = 0; o < s.out; ++o) ref[o] += bias[o];
    }
    check_close(std::string("gemv ") + s.name + " " + shape_name(s.t, 1, s.out, s.in), run_gemv(a, y0, stream.s), ref,
                tol_for(s.out_t));

    // Timing: enough copies of W that the working set (>= 256 MiB) cannot stay in the 60 MiB L2.
    const size_t w_bytes = w.size() * dtype_size(s.t);
    const int copies = static_cast<int>(std::max<size_t>(1, ((256u << 20) + w_bytes - 1) / w_bytes));
    DeviceBuffer w_copies(w_bytes * copies);
    for (int c = 0; c < copies; ++c)
      REQUIRE(cudaMemcpy(static_cast<char*>(w_copies.ptr) + w_bytes * c, d_w->ptr, w_bytes, cudaMemcpyDeviceToDevice) ==
              cudaSuccess);
    DeviceBuffer y(static_cast<size_t>(rows) * 4);
    a.y = y.ptr;
    a.beta = 0.f;  // the timed loop must not compound y
    const double gemv_ms = time_ms(
        [&](int i) {
          cuda::GemvArgs b = a;
          b.w = static_cast<const char*>(w_copies.ptr) + w_bytes * (i % copies);
          cuda::gemv(b, stream.s);
        },
        50, stream.s);
    cuda::GemmArgs g;
    g.x = d_x->ptr;
    g.y = y.ptr;
    g.n = 1;
    g.out = rows;
    g.in = s.in;
    g.in_dtype = s.t;
    g.out_dtype = s.out_t;
    const double gemm_ms = time_ms(
        [&](int i) {
          g.w = static_cast<const char*>(w_copies.ptr) + w_bytes * (i % copies);
          gemm.linear(g, stream.s);
        },
        50, stream.s);
    MESSAGE(std::string(s.name) << " " << shape_name(s.t, 1, s.out, s.in) << ": gemv " << gemv_ms * 1e3 << " us = "
                   << w_bytes / (gemv_ms * 1e-3) / 1e9 << " GB/s; cuBLASLt (no epilogue) " << gemm_ms * 1e3
                   << " us = " << w_bytes / (gemm_ms * 1e-3) / 1e9 << " GB/s");
  }
}

TEST_CASE("gemv: PDL chains, each GEMV reading the previous one's output on the same stream") {
  std::mt19937 rng(13);
  Stream stream;
  for (DType t : {DType::F16, DType::BF16}) {
    for (int n : {1, 4}) {
      // h1 = act(x W1^T + b1) [n, 3000]; h2 = h1 W2^T [n, 2056]; then four accumulates h2 += x_k W3_k^T.
      const int d0 = 2048, d1 = 3000, d2 = 2056;
      const Vec x = random_vec(static_cast<size_t>(n) * d0, -1, 1, t, rng);
      const Vec w1 = random_weights(static_cast<size_t>(d1) * d0, d0, t, rng);
      const Vec b1 = random_vec(d1, -0.5, 0.5, t, rng);
      const Vec w2 = random_weights(static_cast<size_t>(d2) * d1, d1, t, rng);
      const Vec w3 = random_weights(static_cast<size_t>(d2) * d1, d1, t, rng);
      Buf d_x = upload(x, t), d_w1 = upload(w1, t), d_b1 = upload(b1, t), d_w2 = upload(w2, t), d_w3 = upload(w3, t);
      // h1 and h2 start as NaN: a GEMV that read its input before the previous kernel finished fails.
      Buf d_h1 = upload(Vec(static_cast<size_t>(n) * d1, std::numeric_limits<double>::quiet_NaN()), t);
      Buf d_h2 = upload(Vec(static_cast<size_t>(n) * d2, std::numeric_limits<double>::quiet_NaN()), t);
      cuda::GemvArgs a1 = product(d_x->ptr, d_w1->ptr, d_h1->ptr, n, d1, d0, t);
      a1.bias = d_b1->ptr;
      a1.epilogue = cuda::GemvEpilogue::Act;
      a1.act = Activation::Gelu;
      const cuda::GemvArgs a2 = product(d_h1->ptr, d_w2->ptr, d_h2->ptr, n, d2, d1, t);
      cuda::GemvArgs a3 = a2;
      a3.w = d_w3->ptr;
      a3.beta = 1.f;
      REQUIRE(cuda::gemv_supported(a1));
      REQUIRE(cuda::gemv_supported(a2));
      REQUIRE(cuda::gemv_supported(a3));
      cuda::gemv(a1, stream.s);
      cuda::gemv(a2, stream.s);
      for (int k = 0; k < 4; ++k) cuda::gemv(a3, stream.s);  // reads and writes h2 each time
      const Vec h1 = download(d_h1->ptr, static_cast<size_t>(n) * d1, t);
      const Vec h2 = download(d_h2->ptr, static_cast<size_t>(n) * d2, t);
      const std::string what = std::string(name_of(t)) + " n " + std::to_string(n);
      check_close("pdl chain h1 " + what, h1, ref::activation(ref::linear(x, w1, {}, 0, n, d1, d0), b1, Activation::Gelu, false, n, d1),
                  tol_for(t));
      // h2 from the GPU's own h1 (so the check does not compound rounding); each accumulate rounds once
      // more to t, so the tolerance grows with the five roundings.
      Vec ref = ref::linear(h1, w2, {}, 0, n, d2, d1);
      const Vec p3 = ref::linear(h1, w3, {}, 0, n, d2, d1);
      for (size_t i = 0; i < ref.size(); ++i) ref[i] += 4 * p3[i];
      Tolerance tol = tol_for(t);
      tol.atol *= 5;
      tol.rtol *= 5;
      tol.rms *= 5;
      check_close("pdl chain h2 (+= 4 times) " + what, h2, ref, tol);
    }
  }
}

TEST_CASE("gemv: x2_early streams x2 W2^T before griddep_wait, x only after it (PDL chain)") {
  // K1 writes h_a = gelu(x W1^T + b1); K2 writes h_b = x W2^T; K3 = h_b W3^T + h_a W4^T with x2 = h_a and
  // x2_early: K3 may read h_a while K2 still runs (K2 waits for K1 before it lets K3 launch), h_b only
  // after K2. h_a and h_b start as NaN, so reading either too early shows.
  std::mt19937 rng(17);
  Stream stream;
  for (DType t : {DType::F16, DType::BF16, DType::F32}) {
    for (int n : {1, 2}) {
      const int d0 = 2048, da = 8192, db = 2048, d3 = 2048;
      const Vec x = random_vec(static_cast<size_t>(n) * d0, -1, 1, t, rng);
      const Vec w1 = random_weights(static_cast<size_t>(da) * d0, d0, t, rng);
      const Vec b1 = random_vec(da, -0.5, 0.5, t, rng);
      const Vec w2 = random_weights(static_cast<size_t>(db) * d0, d0, t, rng);
      const Vec w3 = random_weights(static_cast<size_t>(d3) * db, db + da, t, rng);
      const Vec w4 = random_weights(static_cast<size_t>(d3) * da, db + da, t, rng);
      Buf d_x = upload(x, t), d_w1 = upload(w1, t), d_b1 = upload(b1, t), d_w2 = upload(w2, t), d_w3 = upload(w3, t),
          d_w4 = upload(w4, t);
      const double nan = std::numeric_limits<double>::quiet_NaN();
      Buf d_ha = upload(Vec(static_cast<size_t>(n) * da, nan), t), d_hb = upload(Vec(static_cast<size_t>(n) * db, nan), t);
      Buf d_y = upload(Vec(static_cast<size_t>(n) * d3, nan), t);
      cuda::GemvArgs k1 = product(d_x->ptr, d_w1->ptr, d_ha->ptr, n, da, d0, t);
      k1.bias = d_b1->ptr;
      k1.epilogue = cuda::GemvEpilogue::Act;
      k1.act = Activation::Gelu;
      const cuda::GemvArgs k2 = product(d_x->ptr, d_w2->ptr, d_hb->ptr, n, db, d0, t);
      cuda::GemvArgs k3 = product(d_hb->ptr, d_w3->ptr, d_y->ptr, n, d3, db, t);
      k3.x2 = d_ha->ptr;
      k3.w2 = d_w4->ptr;
      k3.in2 = da;
      k3.x2_early = true;
      for (int depth : {0, 4})
      for (int parts : {1, 2, 4}) {  // warps per row: each part streams a share of both segments
        k3.tuning.fifo_depth = depth;
        k3.tuning.warps_per_row = parts;
        REQUIRE(cuda::gemv_supported(k3));
        for (int rep = 0; rep < 3; ++rep) {  // NaN again before each chain
          // all-ones bytes: NaN in f32, f16 and bf16
          REQUIRE(cudaMemsetAsync(d_ha->ptr, 0xff, static_cast<size_t>(n) * da * dtype_size(t), stream.s) == cudaSuccess);
          REQUIRE(cudaMemsetAsync(d_hb->ptr, 0xff, static_cast<size_t>(n) * db * dtype_size(t), stream.s) == cudaSuccess);
          cuda::gemv(k1, stream.s);
          cuda::gemv(k2, stream.s);
          cuda::gemv(k3, stream.s);
        }
        const Vec ha = download(d_ha->ptr, static_cast<size_t>(n) * da, t);
        const Vec hb = download(d_hb->ptr, static_cast<size_t>(n) * db, t);
        Vec ref = ref::linear(hb, w3, {}, 0, n, d3, db);  // from the GPU's own h_a, h_b
        const Vec p4 = ref::linear(ha, w4, {}, 0, n, d3, da);
        for (size_t i = 0; i < ref.size(); ++i) ref[i] += p4[i];
        check_close("x2_early chain " + std::string(name_of(t)) + " n " + std::to_string(n) + " depth " +
                        std::to_string(depth) + " P " + std::to_string(parts),
                    download(d_y->ptr, ref.size(), t), ref, tol_for(t));
      }
    }
  }
}

TEST_CASE("gemv_supported: limits, and gemv() throws Error outside them" * doctest::test_suite("host")) {
  // Fake, never dereferenced device addresses: gemv() must throw before launching anything.
  char* const base = reinterpret_cast<char*>(uintptr_t{1} << 20);
  cuda::GemvArgs a;
  a.x = base;
  a.w = base + 4096;
  a.y = base + 8192;
  a.n = 8;
  a.out = 33;
  a.in = 16;
  a.dtype = a.out_dtype = DType::F16;
  CHECK(cuda::gemv_supported(a));

  auto refused = [](cuda::GemvArgs b, const char* why) {
    INFO(why);
    CHECK_FALSE(cuda::gemv_supported(b));
    CHECK(cuda::gemv_unsupported_reason(b) != nullptr);
    CHECK_THROWS_AS(cuda::gemv(b, nullptr), Error);
  };
  cuda::GemvArgs b = a;
  b.n = 9;
  refused(b, "n = 9 > kGemvMaxTokens");
  b = a;
  b.n = 0;
  refused(b, "n = 0");
  b = a;
  b.in = 12;
  refused(b, "in = 12 is not a multiple of 8 for f16");
  b = a;
  b.x = base + 2;
  refused(b, "x misaligned by 2 bytes");
  b = a;
  b.w = base + 4096 + 8;
  refused(b, "w misaligned by 8 bytes");
  b = a;
  b.out_dtype = DType::BF16;
  refused(b, "f16 -> bf16 output");
  b = a;
  b.epilogue = cuda::GemvEpilogue::Act;
  b.beta = 1.f;
  refused(b, "beta with an activation epilogue");
  b = a;
  b.out = 0;
  refused(b, "out = 0");
  b = a;
  b.y = nullptr;
  refused(b, "y null");

  b = a;
  b.dtype = DType::F32;
  b.out_dtype = DType::F32;
  b.in = 12;
  CHECK(cuda::gemv_supported(b));  // f32 vectors are 4 wide
  b.in = 10;
  CHECK_FALSE(cuda::gemv_supported(b));
  b = a;
  b.out_dtype = DType::F32;
  b.n = 1;
  b.epilogue = cuda::GemvEpilogue::GatedAct;
  CHECK(cuda::gemv_supported(b));
}

TEST_CASE("gemv: a second input segment adds x2 W2^T (GPT-NeoX output projection + MLP down in one launch)") {
  std::mt19937 rng(21);
  Stream stream;
  for (DType t : {DType::F32, DType::F16, DType::BF16}) {
    for (int n : {1, 2}) {
      struct Shape { int out, in, in2; };
      for (Shape sh : {Shape{33, 40, 136}, Shape{2050, 2056, 4104}, Shape{2048, 2048, 8192}}) {
        const int in_total = sh.in + sh.in2;
        const Vec w = random_weights(static_cast<size_t>(sh.out) * sh.in, in_total, t, rng);
        const Vec w2 = random_weights(static_cast<size_t>(sh.out) * sh.in2, in_total, t, rng);
        const Vec x = random_vec(static_cast<size_t>(n) * sh.in, -1, 1, t, rng);
        const Vec x2 = random_vec(static_cast<size_t>(n) * sh.in2, -1, 1, t, rng);
        const Vec y0 = random_vec(static_cast<size_t>(n) * sh.out, -1, 1, t, rng);
        Buf d_w = upload(w, t), d_w2 = upload(w2, t), d_x = upload(x, t), d_x2 = upload(x2, t);
        for (float beta : {0.f, 1.f}) {
         for (bool early : {false, true}) {  // x2 W2^T streamed before or after griddep_wait
          Vec ref = ref::linear(x, w, beta != 0.f ? y0 : Vec{}, beta, n, sh.out, sh.in);
          const Vec part2 = ref::linear(x2, w2, {}, 0, n, sh.out, sh.in2);
          for (size_t k = 0; k < ref.size(); ++k) ref[k] += part2[k];
          cuda::GemvArgs a;
          a.x2_early = early;
          a.x = d_x->ptr;
          a.w = d_w->ptr;
          a.x2 = d_x2->ptr;
          a.w2 = d_w2->ptr;
          a.in2 = sh.in2;
          a.n = n;
          a.out = sh.out;
          a.in = sh.in;
          a.dtype = a.out_dtype = t;
          a.beta = beta;
          check_close("gemv two segments " + shape_name(t, n, sh.out, sh.in) + " in2 " + std::to_string(sh.in2) +
                          " beta " + std::to_string(beta) + (early ? " x2_early" : ""),
                      run_gemv(a, y0, stream.s), ref, tol_for(t));
         }
        }
      }
    }
  }
}

TEST_CASE("gemv_pair: QKV (+bias) and MLP up (+bias, gelu) in one launch equal the two products") {
  std::mt19937 rng(22);
  Stream stream;
  for (DType t : {DType::F32, DType::F16, DType::BF16}) {
    for (int n : {1, 2}) {
      struct Shape { int out0, out1, in; };
      for (Shape sh : {Shape{33, 3, 40}, Shape{6144, 8192, 2048}, Shape{1, 2050, 136}}) {
        const Vec w0 = random_weights(static_cast<size_t>(sh.out0) * sh.in, sh.in, t, rng);
        const Vec w1 = random_weights(static_cast<size_t>(sh.out1) * sh.in, sh.in, t, rng);
        const Vec b0 = random_vec(sh.out0, -0.5, 0.5, t, rng), b1 = random_vec(sh.out1, -0.5, 0.5, t, rng);
        const Vec x0 = random_vec(static_cast<size_t>(n) * sh.in, -1, 1, t, rng);
        const Vec x1 = random_vec(static_cast<size_t>(n) * sh.in, -1, 1, t, rng);
        Buf d_w0 = upload(w0, t), d_w1 = upload(w1, t), d_b0 = upload(b0, t), d_b1 = upload(b1, t);
        Buf d_x0 = upload(x0, t), d_x1 = upload(x1, t);
        Buf d_y0 = upload(Vec(static_cast<size_t>(n) * sh.out0, 7.0), t);
        Buf d_y1 = upload(Vec(static_cast<size_t>(n) * sh.out1, 7.0), t);
        const auto [a0, a1] = qkv_up_pair(d_x0->ptr, d_w0->ptr, d_b0->ptr, d_y0->ptr, sh.out0, d_x1->ptr, d_w1->ptr,
                                          d_b1->ptr, d_y1->ptr, sh.out1, n, sh.in, t);
        REQUIRE(cuda::gemv_pair_unsupported_reason(a0, a1) == nullptr);
        cuda::gemv_pair(a0, a1, stream.s);
        // references: x W^T + b, and gelu(x W^T + b)
        Vec r0 = ref::linear(x0, w0, {}, 0, n, sh.out0, sh.in);
        for (int k = 0; k < n; ++k)
          for (int o = 0; o < sh.out0; ++o) r0[static_cast<size_t>(k) * sh.out0 + o] += b0[o];
        const Vec r1 = ref::activation(ref::linear(x1, w1, {}, 0, n, sh.out1, sh.in), b1, Activation::Gelu, false, n,
                                       sh.out1);
        const std::string what = shape_name(t, n, sh.out0, sh.in) + " + out " + std::to_string(sh.out1);
        check_close("gemv_pair product 0 " + what, download(d_y0->ptr, r0.size(), t), r0, tol_for(t));
        check_close("gemv_pair product 1 " + what, download(d_y1->ptr, r1.size(), t), r1, tol_for(t));
      }
    }
  }
}

TEST_CASE("gemv / gemv_pair: argument limits of the second segment and of the pair" * doctest::test_suite("host")) {
  static uint4 buf[64];  // 16-byte aligned host memory for the second segment: nothing is launched
  const cuda::GemvArgs a = host_args();
  CHECK(cuda::gemv_supported(a));
  cuda::GemvArgs s2 = a;
  s2.x2 = buf;
  s2.w2 = buf;
  s2.in2 = 16;
  CHECK(cuda::gemv_supported(s2));
  s2.in2 = 12;  // not a multiple of 8 halves
  CHECK_FALSE(cuda::gemv_supported(s2));
  s2.in2 = 16;
  s2.w2 = nullptr;
  CHECK_FALSE(cuda::gemv_supported(s2));
  s2.w2 = reinterpret_cast<const char*>(buf) + 2;  // misaligned
  CHECK_FALSE(cuda::gemv_supported(s2));
  s2.w2 = buf;
  s2.x2_early = true;
  CHECK(cuda::gemv_supported(s2));
  s2.epilogue = cuda::GemvEpilogue::Act;  // two segments only with the None epilogue
  CHECK_FALSE(cuda::gemv_supported(s2));
  cuda::GemvArgs e = a;
  e.x2_early = true;  // without a second segment
  REQUIRE(cuda::gemv_unsupported_reason(e) != nullptr);
  CHECK(std::string(cuda::gemv_unsupported_reason(e)).find("x2_early") != std::string::npos);
  cuda::GemvArgs up = a;
  up.epilogue = cuda::GemvEpilogue::Act;
  CHECK(cuda::gemv_pair_unsupported_reason(a, up) == nullptr);
  CHECK(cuda::gemv_pair_unsupported_reason(up, a) != nullptr);  // order: None, then Act
  cuda::GemvArgs up3 = up;
  up3.n = 3;
  cuda::GemvArgs a3 = a;
  a3.n = 3;
  CHECK(cuda::gemv_pair_unsupported_reason(a3, up3) != nullptr);  // n <= 2
  cuda::GemvArgs upb = up;
  upb.dtype = upb.out_dtype = DType::BF16;
  CHECK(cuda::gemv_pair_unsupported_reason(a, upb) != nullptr);  // same dtype
  CHECK_THROWS_AS(cuda::gemv_pair(up, a, nullptr), Error);
  static int32_t flag = 1;
  cuda::GemvArgs sk = a;
  sk.skip_if_zero = &flag;
  CHECK(cuda::gemv_supported(sk));
  CHECK(cuda::gemv_pair_unsupported_reason(sk, up) != nullptr);  // gemv() only
}

TEST_CASE("gemv: skip_if_zero, written by the previous kernel, skips the launch at 0 (every epilogue, PDL chain)") {
  std::mt19937 rng(17);
  Stream stream;
  for (DType t : {DType::F32, DType::BF16}) {
    for (int n : {1, 2}) {
      for (cuda::GemvEpilogue e : {cuda::GemvEpilogue::None, cuda::GemvEpilogue::GatedAct}) {
        const int in = 256, out = 72, rows = e == cuda::GemvEpilogue::GatedAct ? 2 * out : out;
        const Vec x = random_vec(static_cast<size_t>(n) * in, -1, 1, t, rng);
        const Vec w = random_weights(static_cast<size_t>(rows) * in, in, t, rng);
        const Vec sentinel(static_cast<size_t>(n) * out, 7.0);
        Buf d_x = upload(x, t), d_w = upload(w, t), d_y = upload(sentinel, t);
        Buf d_flag = upload_i32({1});
        cuda::GemvArgs a = product(d_x->ptr, d_w->ptr, d_y->ptr, n, out, in, t);
        a.epilogue = e;
        a.skip_if_zero = d_flag->as<int32_t>();
        const std::string what = std::string(name_of(t)) + " n " + std::to_string(n) +
                                 (e == cuda::GemvEpilogue::None ? " none" : " gated");
        // the flag is cleared on the stream right before: the launch must see 0 and write nothing
        REQUIRE(cudaMemsetAsync(d_flag->ptr, 0, sizeof(int32_t), stream.s) == cudaSuccess);
        cuda::gemv(a, stream.s);
        check_close("skipped " + what, download(d_y->ptr, sentinel.size(), t), sentinel, {0, 0, 0});
        const int32_t one = 3;
        REQUIRE(cudaMemcpyAsync(d_flag->ptr, &one, sizeof(one), cudaMemcpyHostToDevice, stream.s) == cudaSuccess);
        cuda::gemv(a, stream.s);
        const Vec y = ref::linear(x, w, {}, 0, n, rows, in);
        const Vec ref = e == cuda::GemvEpilogue::None ? y : ref::activation(y, {}, Activation::Silu, true, n, out);
        check_close("not skipped " + what, download(d_y->ptr, ref.size(), t), ref, tol_for(t));
      }
    }
  }
}

TEST_CASE("gemv / gemv_pair: every weight-streaming tuning gives results bit-identical to register batches with "
          "the same warps per row, and within rounding of one warp per row") {
  // The default (register batches, auto warps per row) is checked against the CPU reference above. For
  // each P (warps per row), the register batches of 4 warps with P are the reference: every other
  // tuning with P, the shared-memory FIFO of every depth and block size, must produce the same bytes;
  // P 2 and 4 (split-K, other summation order) must be within the dtype tolerance of P 1.
  std::mt19937 rng(23);
  Stream stream;
  const cuda::GemvTuning streamings[] = {{0, 4}, {0, 2}, {0, 8}, {4, 2}, {4, 4}, {8, 4}, {8, 8}, {16, 2}, {16, 4}, {16, 8}};
  auto with_parts = [](cuda::GemvTuning t, int parts) {
    t.warps_per_row = parts;
    return t;
  };
  for (DType t : {DType::F32, DType::F16, DType::BF16}) {
    struct Shape { int out, in, in2; };
    for (Shape sh : {Shape{33, 40, 0}, Shape{3, 136, 4104}, Shape{2050, 4104, 0}, Shape{517, 2056, 520}}) {
      const Vec w = random_weights(static_cast<size_t>(2) * sh.out * sh.in, sh.in, t, rng);
      const Vec w2 = random_weights(static_cast<size_t>(sh.out) * std::max(sh.in2, 8), sh.in + sh.in2, t, rng);
      const Vec bias = random_vec(static_cast<size_t>(2) * sh.out, -0.5, 0.5, t, rng);
      Buf d_w = upload(w, t), d_w2 = upload(w2, t), d_bias = upload(bias, t);
      for (int n : {1, 2, 3, 8}) {  // 1 and 2: the buckets with split rows
        const Vec x = random_vec(static_cast<size_t>(n) * sh.in, -1, 1, t, rng);
        const Vec x2 = random_vec(static_cast<size_t>(n) * std::max(sh.in2, 8), -1, 1, t, rng);
        const Vec y0 = random_vec(static_cast<size_t>(n) * sh.out, -1, 1, t, rng);
        Buf d_x = upload(x, t), d_x2 = upload(x2, t);
        for (auto e : {cuda::GemvEpilogue::None, cuda::GemvEpilogue::Act, cuda::GemvEpilogue::GatedAct}) {
          cuda::GemvArgs a;
          a.x = d_x->ptr;
          a.w = d_w->ptr;
          a.n = n;
          a.out = sh.out;
          a.in = sh.in;
          a.dtype = a.out_dtype = t;
          a.epilogue = e;
          a.act = Activation::Gelu;
          a.bias = d_bias->ptr;
          if (e == cuda::GemvEpilogue::None) {
            a.beta = 1.f;
            if (sh.in2 > 0) {
              a.x2 = d_x2->ptr;
              a.w2 = d_w2->ptr;
              a.in2 = sh.in2;
            }
          }
         for (bool early : {false, true}) {
          if (early && a.in2 == 0) continue;
          a.x2_early = early;
          const std::string what = "gemv epilogue " + std::to_string(static_cast<int>(e)) + " " +
                                   shape_name(t, n, sh.out, sh.in) + " in2 " + std::to_string(a.in2) +
                                   (early ? " x2_early" : "");
          Vec one_warp;  // P 1
          for (int parts : {1, 2, 4}) {
            if (parts > 1 && n > 2) continue;  // split rows are built for n <= 2 (gemv_supported)
            cuda::GemvArgs ref = a;
            ref.tuning = with_parts({0, 4}, parts);
            const Vec want = run_gemv(ref, y0, stream.s);
            if (parts == 1) one_warp = want;
            else check_close(what + " P " + std::to_string(parts) + " vs P 1", want, one_warp, tol_for(t));
            for (const cuda::GemvTuning& st : streamings) {
              if (parts > st.warps_per_block || (parts > 1 && st.fifo_depth > 4)) continue;
              cuda::GemvArgs b = a;
              b.tuning = with_parts(st, parts);
              const Vec got = run_gemv(b, y0, stream.s);
              REQUIRE(got.size() == want.size());
              size_t diff = 0;
              for (size_t k = 0; k < got.size(); ++k) diff += got[k] != want[k];
              INFO(what << " depth " << st.fifo_depth << " warps " << st.warps_per_block << " P " << parts);
              CHECK(diff == 0);
            }
          }
         }
        }
        if (n > 2) continue;
        // the pair: QKV-like None (+bias) and MLP-up-like Act (+bias) products
        Buf d_y0 = upload(Vec(static_cast<size_t>(n) * sh.out, 0.0), t);
        Buf d_y1 = upload(Vec(static_cast<size_t>(n) * sh.out, 0.0), t);
        const void* w1 = static_cast<const char*>(d_w->ptr) + static_cast<size_t>(sh.out) * sh.in * dtype_size(t);
        const auto [p0, p1] = qkv_up_pair(d_x->ptr, d_w->ptr, d_bias->ptr, d_y0->ptr, sh.out, d_x->ptr, w1,
                                          d_bias->ptr, d_y1->ptr, sh.out, n, sh.in, t);
        Vec one0, one1;  // P 1
        for (int parts : {1, 2, 4}) {
          cuda::GemvArgs r0 = p0;
          r0.tuning = with_parts({0, 4}, parts);
          cuda::gemv_pair(r0, p1, stream.s);
          const Vec want0 = download(d_y0->ptr, static_cast<size_t>(n) * sh.out, t);
          const Vec want1 = download(d_y1->ptr, static_cast<size_t>(n) * sh.out, t);
          const std::string what = "gemv_pair " + shape_name(t, n, sh.out, sh.in) + " P " + std::to_string(parts);
          if (parts == 1) {
            one0 = want0;
            one1 = want1;
          } else {
            check_close(what + " a0 vs P 1", want0, one0, tol_for(t));
            check_close(what + " a1 vs P 1", want1, one1, tol_for(t));
          }
          for (const cuda::GemvTuning& st : streamings) {
            if (parts > st.warps_per_block || (parts > 1 && st.fifo_depth > 4)) continue;
            cuda::GemvArgs q0 = p0, q1 = p1;
            q0.tuning = with_parts(st, parts);
            cuda::gemv_pair(q0, q1, stream.s);
            const Vec got0 = download(d_y0->ptr, want0.size(), t), got1 = download(d_y1->ptr, want1.size(), t);
            size_t diff = 0;
            for (size_t k = 0; k < got0.size(); ++k) diff += (got0[k] != want0[k]) + (got1[k] != want1[k]);
            INFO(what << " depth " << st.fifo_depth << " warps " << st.warps_per_block);
            CHECK(diff == 0);
          }
        }
      }
    }
  }
}

TEST_CASE("gemv_supported: tuning values" * doctest::test_suite("host")) {
  cuda::GemvArgs a = host_args();
  for (int d : {-1, 0, 4, 8, 16}) {
    a.tuning.fifo_depth = d;
    CHECK(cuda::gemv_supported(a));
  }
  for (int d : {-2, 1, 2, 3, 5, 32}) {
    a.tuning.fifo_depth = d;
    CHECK_FALSE(cuda::gemv_supported(a));
  }
  a.tuning.fifo_depth = -1;
  for (int w : {0, 2, 4, 8}) {
    a.tuning.warps_per_block = w;
    CHECK(cuda::gemv_supported(a));
  }
  for (int w : {-1, 1, 3, 16}) {
    a.tuning.warps_per_block = w;
    CHECK_FALSE(cuda::gemv_supported(a));
  }
  a.tuning.warps_per_block = 0;  // the default, 4 warps
  for (int p : {0, 1, 2, 4}) {
    a.tuning.warps_per_row = p;
    CHECK(cuda::gemv_supported(a));
  }
  for (int p : {-1, 3, 8}) {
    a.tuning.warps_per_row = p;
    CHECK_FALSE(cuda::gemv_supported(a));
  }
  a.tuning.warps_per_block = 2;
  a.tuning.warps_per_row = 4;  // more warps per row than the block has
  CHECK_FALSE(cuda::gemv_supported(a));
  a.tuning.warps_per_row = 2;
  CHECK(cuda::gemv_supported(a));
  a.tuning.warps_per_block = 4;
  for (int d : {-1, 0, 4}) {
    a.tuning.fifo_depth = d;
    CHECK(cuda::gemv_supported(a));
  }
  for (int d : {8, 16}) {  // split rows are built for register batches and the depth-4 FIFO only
    a.tuning.fifo_depth = d;
    CHECK_FALSE(cuda::gemv_supported(a));
  }
  a.tuning.fifo_depth = 0;
  a.n = 3;  // ... and for n <= 2
  CHECK_FALSE(cuda::gemv_supported(a));
  a.tuning.warps_per_row = 0;  // auto: one warp per row there
  CHECK(cuda::gemv_supported(a));
  a.n = 1;
  a.tuning = {};
  // the transformer's policy: FIFO 4x4 at tp > 1 only, register batches of 4 warps at tp 1, rows auto
  const cuda::GemvTuning multi = cuda::gemv_tuning_for(2), single = cuda::gemv_tuning_for(1);
  CHECK(multi.fifo_depth == 4);
  CHECK(multi.warps_per_block == 4);
  CHECK(multi.warps_per_row == 0);
  CHECK(single.fifo_depth == 0);
  CHECK(single.warps_per_block == 4);
  CHECK(single.warps_per_row == 0);
}

TEST_CASE("gemv_auto_warps_per_row: 2 warps per row for register batches, 1 for the FIFO, more when the launch "
          "has too few rows for the GPU" * doctest::test_suite("host")) {
  const int sms = 132;  // H200
  const int target = cuda::kGemvTargetWarpsPerSm * sms;
  for (int depth : {0, 4}) {
    const int least = depth == 0 ? 2 : 1;
    INFO("fifo_depth " << depth);
    CHECK(cuda::gemv_auto_warps_per_row(14336, sms, depth) == least);   // Pythia-1.4B qkv + up pair
    CHECK(cuda::gemv_auto_warps_per_row(50304, sms, depth) == least);   // Pythia-1.4B LM head
    CHECK(cuda::gemv_auto_warps_per_row(target, sms, depth) == least);  // exactly the target
    CHECK(cuda::gemv_auto_warps_per_row(2048, sms, depth) == 2);        // Pythia-1.4B dense + down
    CHECK(cuda::gemv_auto_warps_per_row((target + 1) / 2, sms, depth) == 2);
    CHECK(cuda::gemv_auto_warps_per_row((target + 1) / 2 - 1, sms, depth) == 4);
    CHECK(cuda::gemv_auto_warps_per_row(1, sms, depth) == 4);
    CHECK(cuda::gemv_auto_warps_per_row(1, 0, depth) == least);  // unknown SM count: no row is too few
  }
  CHECK(cuda::gemv_auto_warps_per_row(target - 1, sms, 4) == 2);
}
