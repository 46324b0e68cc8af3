// test_ops.cpp: each CPU op against hand-computed values (and a naive f64 loop for the blocked matmul).
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "runtime/cpu/ops.h"
#include "runtime/rope.h"

using namespace tpshard;
using namespace tpshard::cpu;

TEST_CASE("linear: y = x W^T + b, hand-computed") {
  ThreadPool pool(2);
  const std::vector<float> x = {1, 2, 3, -1, 0, 2};  // [2, 3]
  const std::vector<float> w = {1, 0, -1, 2, 1, 0.5f};  // [2, 3]
  const std::vector<float> b = {0.5f, -1};
  std::vector<float> y(4);
  linear(pool, x.data(), w.data(), b.data(), y.data(), 2, 3, 2);
  // row 0: [1-3, 2+2+1.5] + b = [-1.5, 4.5]; row 1: [-1-2, -2+0+1] + b = [-2.5, -2]
  CHECK(y == std::vector<float>{-1.5f, 4.5f, -2.5f, -2.0f});
}

TEST_CASE("linear: blocked paths (4-token blocks, tails of 8-lane dots, several threads) match f64") {
  for (int threads : {1, 3}) {
    ThreadPool pool(threads);
    const int64_t n = 7, in = 37, out = 131;  // 7 tokens = one block of 4 + 3; 37 = 4*8 + 5
    std::vector<float> x(n * in), w(out * in), b(out), y(n * out);
    for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37 * i);
    for (size_t i = 0; i < w.size(); ++i) w[i] = std::cos(0.11 * i) * 0.5f;
    for (size_t i = 0; i < b.size(); ++i) b[i] = 0.01f * i;
    linear(pool, x.data(), w.data(), b.data(), y.data(), n, in, out);
    double max_err = 0;
    for (int64_t t = 0; t < n; ++t)
      for (int64_t o = 0; o < out; ++o) {
        double ref = b[o];
        for (int64_t i = 0; i < in; ++i) ref += static_cast<double>(x[t * in + i]) * w[o * in + i];
        max_err = std::max(max_err, std::abs(ref - y[t * out + o]));
      }
    CHECK(max_err < 1e-5);
  }
}

TEST_CASE("layer_norm and rms_norm, hand-computed") {
  const std::vector<float> x = {1, 2, 3, 4};
  const std::vector<float> w = {1, 1, 2, 1}, b = {0, 0, 0, 1};
  std::vector<float> y(4);
  layer_norm(x.data(), w.data(), b.data(), y.data(), 1, 4, 0.0);
  // mean 2.5, biased var 1.25
  const double s = std::sqrt(1.25);
  CHECK(y[0] == doctest::Approx(-1.5 / s));
  CHECK(y[1] == doctest::Approx(-0.5 / s));
  CHECK(y[2] == doctest::Approx(2 * 0.5 / s));
  CHECK(y[3] == doctest::Approx(1.5 / s + 1));

  const std::vector<float> x2 = {3, 4}, w2 = {1, 2};
  std::vector<float> y2(2);
  rms_norm(x2.data(), w2.data(), y2.data(), 1, 2, 0.0);
  const double rms = std::sqrt(12.5);  // mean(9, 16)
  CHECK(y2[0] == doctest::Approx(3 / rms));
  CHECK(y2[1] == doctest::Approx(8 / rms));
}

TEST_CASE("activations, hand-computed") {
  CHECK(activation_value(Activation::Gelu, 1.0f) == doctest::Approx(0.8413447460685429));
  CHECK(activation_value(Activation::GeluTanh, 1.0f) == doctest::Approx(0.8411919906082768));
  CHECK(activation_value(Activation::Silu, 1.0f) == doctest::Approx(0.7310585786300049));
  CHECK(activation_value(Activation::Relu, -1.0f) == 0.0f);
  CHECK(activation_value(Activation::Gelu, 0.0f) == 0.0f);
  const std::vector<float> gate_up = {1, 0, 2, 3};  // one token, inter 2: gate [1, 0], up [2, 3]
  std::vector<float> out(2);
  gated_activation(Activation::Silu, gate_up.data(), out.data(), 1, 2);
  CHECK(out[0] == doctest::Approx(2 * 0.7310585786300049));
  CHECK(out[1] == 0.0f);
}

TEST_CASE("attention_head: softmax(q k^T) v, hand-computed; split into spans it gives the same bits") {
  const std::vector<float> q = {1, 0}, k = {1, 0, 0, 1}, v = {1, 2, 3, 4};
  std::vector<float> out(2), scores(2);
  const KvSpan whole{k.data(), v.data(), 2};
  attention_head(q.data(), &whole, 1, 2, 1.0f, out.data(), scores.data());
  const double p0 = std::exp(1.0) / (std::exp(1.0) + 1), p1 = 1 - p0;
  CHECK(out[0] == doctest::Approx(p0 * 1 + p1 * 3));
  CHECK(out[1] == doctest::Approx(p0 * 2 + p1 * 4));
  // The same positions as two spans in other buffers (a shared prefix, then the sequence's own).
  const std::vector<float> k1 = {1, 0}, v1 = {1, 2}, k2 = {0, 1}, v2 = {3, 4};
  const KvSpan split[2] = {{k1.data(), v1.data(), 1}, {k2.data(), v2.data(), 1}};
  std::vector<float> out2(2);
  attention_head(q.data(), split, 2, 2, 1.0f, out2.data(), scores.data());
  CHECK(out2 == out);
  // One position: output is v itself.
  const KvSpan first{k.data(), v.data(), 1};
  attention_head(q.data(), &first, 1, 2, 0.5f, out.data(), scores.data());
  CHECK(out == std::vector<float>{1, 2});
}

TEST_CASE("Gemma 2 ops, hand-computed: rms_norm with weight offset 1, soft-cap, soft-capped attention scores") {
  const std::vector<float> x = {3, 4}, w = {0, -0.5f};
  std::vector<float> y(2);
  rms_norm(x.data(), w.data(), y.data(), 1, 2, 0.0, 1.0f);  // x / rms * (1 + w)
  const double rms = std::sqrt(12.5);
  CHECK(y[0] == doctest::Approx(3 / rms));
  CHECK(y[1] == doctest::Approx(0.5 * 4 / rms));

  std::vector<float> v = {0, 1, -60, 600};
  softcap(v.data(), 4, 30.0f);
  CHECK(v[0] == 0.0f);
  CHECK(v[1] == doctest::Approx(30 * std::tanh(1.0 / 30)));
  CHECK(v[2] == doctest::Approx(-30 * std::tanh(2.0)));
  CHECK(v[3] == doctest::Approx(30.0));

  // scores 4 and 0 capped at 2: 2 tanh(2) and 0
  const std::vector<float> q = {4, 0}, k = {1, 0, 0, 1}, vv = {1, 2, 3, 4};
  std::vector<float> out(2), scores(2);
  const KvSpan whole{k.data(), vv.data(), 2};
  attention_head(q.data(), &whole, 1, 2, 1.0f, out.data(), scores.data(), 2.0f);
  const double s0 = 2 * std::tanh(2.0);
  const double p0 = std::exp(s0) / (std::exp(s0) + 1), p1 = 1 - p0;
  CHECK(out[0] == doctest::Approx(p0 * 1 + p1 * 3));
  CHECK(out[1] == doctest::Approx(p0 * 2 + p1 * 4));
}

TEST_CASE("rotary: inv_freq and rotate_half, hand-computed") {
  ModelConfig c;
  c.head_dim = 6;
  c.rotary_ndims = 4;  // partial rotary: dims 4, 5 unchanged
  c.rope_theta = 10000.0;
  const std::vector<float> inv = rope_inv_freq(c);
  REQUIRE(inv.size() == 2);
  CHECK(inv[0] == 1.0f);
  CHECK(inv[1] == doctest::Approx(0.01));
  std::vector<float> x = {1, 2, 3, 4, 5, 6};
  apply_rotary(x.data(), 1, inv);
  // pairs (x0, x2) with angle 1 and (x1, x3) with angle 0.01
  CHECK(x[0] == doctest::Approx(std::cos(1.0) - 3 * std::sin(1.0)));
  CHECK(x[2] == doctest::Approx(3 * std::cos(1.0) + std::sin(1.0)));
  CHECK(x[1] == doctest::Approx(2 * std::cos(0.01) - 4 * std::sin(0.01)));
  CHECK(x[3] == doctest::Approx(4 * std::cos(0.01) + 2 * std::sin(0.01)));
  CHECK(x[4] == 5.0f);
  CHECK(x[5] == 6.0f);

  c.rope_type = RopeType::Linear;
  c.rope_factor = 4.0;
  CHECK(rope_inv_freq(c)[1] == doctest::Approx(0.0025));
}

TEST_CASE("rotary: llama3 scaling matches transformers _compute_llama3_parameters") {
  ModelConfig c;
  c.head_dim = 8;
  c.rotary_ndims = 8;
  c.rope_theta = 10000.0;
  c.rope_type = RopeType::Llama3;
  c.rope_factor = 8.0;
  c.rope_low_freq_factor = 1.0;
  c.rope_high_freq_factor = 4.0;
  c.rope_original_max_position_embeddings = 128;
  const std::vector<float> inv = rope_inv_freq(c);
  // transformers 5.24: ROPE_INIT_FUNCTIONS["llama3"] on this config. inv_freq 1 (wavelength 6.3 < 32:
  // unchanged), 0.1 (62.8: smoothed), 0.01 and 0.001 (> 128: divided by 8).
  CHECK(inv[0] == 1.0f);
  CHECK(inv[1] == doctest::Approx(0.04275117814540863).epsilon(1e-6));
  CHECK(inv[2] == doctest::Approx(0.0012499999720603228).epsilon(1e-6));
  CHECK(inv[3] == doctest::Approx(0.0001250000059371814).epsilon(1e-6));
}
