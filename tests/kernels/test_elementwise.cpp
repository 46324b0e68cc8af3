// test_elementwise.cpp: embedding, add_norm, rotary (and its inv_freq table), activation and bias_add
// kernels against tests/reference, over every dtype and awkward sizes.
#include <doctest/doctest.h>

#include <cmath>

#include "kernels/activation.cuh"
#include "kernels/bias_add.cuh"
#include "kernels/embedding.cuh"
#include "kernels/norm.cuh"
#include "kernels/rotary.cuh"
#include "runtime/rope.h"
#include "tests/kernels/test_util.h"
#include "tests/reference/reference.h"

using namespace tpshard;
using namespace tpshard::test;

static const DType kDtypes[] = {DType::F32, DType::F16, DType::BF16};

TEST_CASE("embedding: vocab-parallel rows, zeros for other ranks' ids") {
  std::mt19937 rng(1);
  for (DType t : kDtypes) {
    const int hidden = 300, vpr = 19;  // global vocab 37 padded to 38 over 2 ranks
    for (int rank = 0; rank < 2; ++rank) {
      const Vec table = random_vec(static_cast<size_t>(vpr) * hidden, -1, 1, t, rng);
      const std::vector<int32_t> tokens = {0, 18, 19, 36, 5, 25, 19};
      Buf d_table = upload(table, t), d_tok = upload_i32(tokens);
      DeviceBuffer out(tokens.size() * hidden * 4);
      cuda::EmbeddingParams p;
      p.tokens = d_tok->as<int32_t>();
      p.table = d_table->ptr;
      p.out = out.as<float>();
      p.dtype = t;
      p.n = static_cast<int>(tokens.size());
      p.hidden = hidden;
      p.vocab_begin = rank * vpr;
      p.vocab_per_rank = vpr;
      cuda::embedding_lookup(p, nullptr);
      const Vec ref = ref::embedding(tokens, table, hidden, rank * vpr, vpr);
      check_close(std::string("embedding ") + name_of(t), download(out.ptr, ref.size(), DType::F32), ref, {0, 0, 0});
    }
  }
}

TEST_CASE("add_norm: LayerNorm and RMSNorm with residual adds and two outputs") {
  std::mt19937 rng(2);
  for (DType t : kDtypes) {
    for (NormKind kind : {NormKind::LayerNorm, NormKind::RmsNorm}) {
      for (int hidden : {64, 100, 1000, 4099, 6144}) {
        const int n = 5;
        // GPT-NeoX-20B-like magnitudes: large residual values that overflow fp16 sums of squares
        Vec residual = round_to(random_vec(static_cast<size_t>(n) * hidden, -300, 300, DType::F32, rng), DType::F32);
        const Vec add0 = random_vec(static_cast<size_t>(n) * hidden, -2, 2, t, rng);
        const Vec b0 = random_vec(hidden, -1, 1, t, rng), b1 = random_vec(hidden, -1, 1, t, rng);
        const Vec w0 = random_vec(hidden, 0.5, 1.5, t, rng), w1 = random_vec(hidden, -1, 1, t, rng);
        const Vec beta0 = random_vec(hidden, -0.5, 0.5, t, rng), beta1 = random_vec(hidden, -0.5, 0.5, t, rng);
        const bool ln = kind == NormKind::LayerNorm;
        Buf d_res = upload(residual, DType::F32), d_add = upload(add0, t), d_b0 = upload(b0, t), d_b1 = upload(b1, t);
        Buf d_w0 = upload(w0, t), d_w1 = upload(w1, t), d_be0 = upload(beta0, t), d_be1 = upload(beta1, t);
        DeviceBuffer out0(static_cast<size_t>(n) * hidden * 4), out1(static_cast<size_t>(n) * hidden * 4);
        cuda::AddNormParams p;
        p.residual = d_res->as<float>();
        p.add0 = d_add->ptr;
        p.add_bias0 = d_b0->ptr;
        p.add_bias1 = d_b1->ptr;
        p.weight0 = d_w0->ptr;
        p.bias0 = ln ? d_be0->ptr : nullptr;
        p.out0 = out0.ptr;
        p.weight1 = d_w1->ptr;
        p.bias1 = ln ? d_be1->ptr : nullptr;
        p.out1 = out1.ptr;
        p.dtype = t;
        p.kind = kind;
        p.eps = 1e-5f;
        p.n = n;
        p.hidden = hidden;
        cuda::add_norm(p, nullptr);
        Vec res_ref = residual;
        const Vec ref0 = ref::add_norm(res_ref, add0, b0, b1, w0, ln ? beta0 : Vec{}, kind, 1e-5, n, hidden);
        Vec res_ref2 = res_ref;  // second norm of the updated residual, no more adds
        const Vec ref1 = ref::add_norm(res_ref2, {}, {}, {}, w1, ln ? beta1 : Vec{}, kind, 1e-5, n, hidden);
        const std::string what = std::string(ln ? "layernorm " : "rmsnorm ") + name_of(t) + " hidden " + std::to_string(hidden);
        check_close(what + " residual", download(d_res->ptr, res_ref.size(), DType::F32), res_ref, {1e-4, 1e-6, 1e-6});
        check_close(what + " out0", download(out0.ptr, ref0.size(), t), ref0, tol_for(t));
        check_close(what + " out1", download(out1.ptr, ref1.size(), t), ref1, tol_for(t));
      }
    }
  }
}

TEST_CASE("rotary: full and partial rotary, head_dim 64/80/128, GQA rows") {
  std::mt19937 rng(3);
  struct Case { int hd, rot, heads, kv; };
  for (DType t : kDtypes) {
    for (Case c : {Case{64, 64, 4, 4}, Case{80, 20, 3, 3}, Case{128, 128, 8, 2}, Case{128, 32, 5, 1}}) {
      const int n = 7;
      const int64_t stride = static_cast<int64_t>(c.heads + 2 * c.kv) * c.hd;
      Vec qkv = random_vec(n * stride, -2, 2, t, rng);
      const std::vector<int32_t> pos = {0, 1, 2, 17, 511, 1000, 2047};
      ModelConfig mc;
      mc.rotary_ndims = c.rot;
      mc.head_dim = 256;  // rope_inv_freq checks rotary_ndims <= head_dim
      mc.rope_theta = 10000.0;
      const std::vector<float> inv = rope_inv_freq(mc);
      const std::vector<double> inv_ref = ref::inv_freq_default(10000.0, c.rot);
      // the table is f32, computed as transformers does (float32 powers): within a few f32 ulps of exact
      for (size_t i = 0; i < inv.size(); ++i) CHECK(std::fabs(inv[i] - inv_ref[i]) <= 5e-7 * inv_ref[i]);
      Buf d_qkv = upload(qkv, t), d_pos = upload_i32(pos);
      Buf d_inv = upload(Vec(inv.begin(), inv.end()), DType::F32);
      cuda::RotaryParams p;
      p.qkv = d_qkv->ptr;
      p.row_stride = stride;
      p.positions = d_pos->as<int32_t>();
      p.inv_freq = d_inv->as<float>();
      p.dtype = t;
      p.n = n;
      p.num_heads = c.heads;
      p.num_kv_heads = c.kv;
      p.head_dim = c.hd;
      p.rotary_ndims = c.rot;
      cuda::apply_rotary(p, nullptr);
      Vec ref = qkv;
      ref::rotary(ref, stride, pos, std::vector<double>(inv.begin(), inv.end()), c.heads, c.kv, c.hd, c.rot);
      // positions up to 2047: angle error ~ pos * ulp(f32) dominates for f32
      Tolerance tol = tol_for(t);
      if (t == DType::F32) tol = {2e-4, 2e-4, 1e-4};
      check_close(std::string("rotary ") + name_of(t) + " hd " + std::to_string(c.hd) + " rot " + std::to_string(c.rot),
                  download(d_qkv->ptr, ref.size(), t), ref, tol);
      // attention_factor (yarn): cos and sin scaled, i.e. the rotated dims of Q and K heads scaled
      const float factor = 1.1386294f;
      Buf d_qkv2 = upload(qkv, t);
      p.qkv = d_qkv2->ptr;
      p.attention_factor = factor;
      cuda::apply_rotary(p, nullptr);
      Vec scaled = ref;
      for (int r = 0; r < n; ++r)
        for (int h = 0; h < c.heads + c.kv; ++h)
          for (int d = 0; d < c.rot; ++d) scaled[r * stride + h * c.hd + d] *= factor;
      check_close(std::string("rotary x attention_factor ") + name_of(t) + " hd " + std::to_string(c.hd),
                  download(d_qkv2->ptr, scaled.size(), t), scaled, tol);
    }
  }
}

TEST_CASE("rope_inv_freq: llama3 scaling matches transformers' _compute_llama3_parameters" * doctest::test_suite("host")) {
  // Values printed by transformers 5.x ROPE_INIT_FUNCTIONS["llama3"] for head_dim 128, theta 500000,
  // factor 8, low 1, high 4, original 8192 (Llama-3.1-8B): indices 0, 20, 40, 63.
  ModelConfig c;
  c.rotary_ndims = 128;
  c.rope_theta = 500000.0;
  c.rope_type = RopeType::Llama3;
  c.rope_factor = 8.0;
  c.rope_low_freq_factor = 1.0;
  c.rope_high_freq_factor = 4.0;
  c.rope_original_max_position_embeddings = 8192;
  c.head_dim = 128;
  const std::vector<float> f = rope_inv_freq(c);
  REQUIRE(f.size() == 64);
  const std::pair<int, double> expected[] = {{0, 1.000000000e+00}, {20, 1.656044088e-02}, {40, 3.428102355e-05}, {63, 3.068925878e-07}};
  for (auto [i, v] : expected) CHECK(std::fabs(f[i] - v) <= 2e-6 * v);
}

TEST_CASE("rope_inv_freq: default and linear scaling" * doctest::test_suite("host")) {
  ModelConfig c;
  c.rotary_ndims = 32;  // e.g. GPT-NeoX head_dim 128 with rotary_pct 0.25
  c.rope_theta = 10000.0;
  c.head_dim = 128;
  const std::vector<float> f = rope_inv_freq(c);
  const std::vector<double> r = ref::inv_freq_default(10000.0, 32);
  REQUIRE(f.size() == 16);
  for (size_t i = 0; i < f.size(); ++i) CHECK(std::fabs(f[i] - r[i]) <= 5e-7 * r[i]);  // f32, like transformers: a few ulps
  c.rope_type = RopeType::Linear;
  c.rope_factor = 4.0;  // linear: positions / factor, i.e. inv_freq / factor
  const std::vector<float> g = rope_inv_freq(c);
  for (size_t i = 0; i < g.size(); ++i) CHECK(std::fabs(g[i] - r[i] / 4.0) <= 5e-7 * r[i]);
}

TEST_CASE("activation: gelu, gelu_tanh, silu, relu; gated and plain; with bias") {
  std::mt19937 rng(4);
  for (DType t : kDtypes) {
    for (Activation act : {Activation::Gelu, Activation::GeluTanh, Activation::Silu, Activation::Relu}) {
      for (bool gated : {true, false}) {
        const int n = 3, width = 1001;
        const Vec in = random_vec(static_cast<size_t>(n) * width * (gated ? 2 : 1), -6, 6, t, rng);
        const Vec bias = random_vec(static_cast<size_t>(width) * (gated ? 2 : 1), -1, 1, t, rng);
        Buf d_in = upload(in, t), d_b = upload(bias, t);
        DeviceBuffer out(static_cast<size_t>(n) * width * 4);
        cuda::ActivationParams p;
        p.in = d_in->ptr;
        p.bias = d_b->ptr;
        p.out = out.ptr;
        p.dtype = t;
        p.act = act;
        p.gated = gated;
        p.n = n;
        p.width = width;
        cuda::activation(p, nullptr);
        const Vec ref = ref::activation(in, bias, act, gated, n, width);
        check_close(std::string("activation ") + name_of(t) + " act " + std::to_string(static_cast<int>(act)) +
                        (gated ? " gated" : " plain"),
                    download(out.ptr, ref.size(), t), ref, tol_for(t));
      }
    }
  }
}

TEST_CASE("bias_add: row broadcast") {
  std::mt19937 rng(5);
  for (DType t : kDtypes) {
    const int n = 9, width = 333;
    const Vec x = random_vec(static_cast<size_t>(n) * width, -3, 3, t, rng), b = random_vec(width, -3, 3, t, rng);
    Buf d_x = upload(x, t), d_b = upload(b, t);
    cuda::bias_add(d_x->ptr, d_b->ptr, n, width, t, nullptr);
    Vec ref = x;
    for (int i = 0; i < n * width; ++i) ref[i] += b[i % width];
    check_close(std::string("bias_add ") + name_of(t), download(d_x->ptr, ref.size(), t), ref, tol_for(t));
  }
}
