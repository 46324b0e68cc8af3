// test_moe.cpp: the mixture-of-experts kernels (kernels/moe.cuh) against model/moe_routing.h (routing
// ids, weights and the permutation, exactly), and the whole block (kernels/moe_block.cuh, exact rows
// and masked) against the double-precision reference (tests/reference/moe.cpp), f32 and bf16.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "kernels/gemm.cuh"
#include "kernels/moe.cuh"
#include "kernels/moe_block.cuh"
#include "model/moe_routing.h"
#include "tests/kernels/test_util.h"
#include "tests/reference/reference.h"

using namespace tpshard;
using namespace tpshard::test;

namespace {

/// The workspace of moe_block for up to max_tokens tokens (the sizes model/activation_plan.h plans).
struct Workspace {
  std::vector<Buf> bufs;
  cuda::MoeWorkspace ws;
  Workspace(int max_tokens, int experts, int top_k, int hidden, int inter, DType t) {
    const size_t T = static_cast<size_t>(max_tokens), E = static_cast<size_t>(experts), K = static_cast<size_t>(top_k);
    const size_t H = static_cast<size_t>(hidden), I = static_cast<size_t>(inter), es = dtype_size(t);
    const size_t rows = static_cast<size_t>(moe_permuted_rows(static_cast<int64_t>(T * K), static_cast<int64_t>(E)));
    auto get = [&](size_t bytes) {
      bufs.push_back(std::make_unique<DeviceBuffer>(bytes));
      return bufs.back()->ptr;
    };
    ws.router_logits = static_cast<float*>(get(T * E * 4));
    ws.ids = static_cast<int32_t*>(get(T * K * 4));
    ws.weights = static_cast<float*>(get(T * K * 4));
    ws.slots = static_cast<int32_t*>(get(T * K * 4));
    ws.offsets = static_cast<int32_t*>(get((2 * E + 1) * 4));
    REQUIRE(cudaMallocHost(&ws.offsets_host, (2 * E + 1) * 4) == cudaSuccess);
    ws.gathered = get(rows * H * es);
    ws.expert_out = get(rows * H * es);
    ws.ffn = get(T * 2 * I * es);
    ws.act = get(T * I * es);
    ws.acc = static_cast<float*>(get(T * H * 4));
  }
  ~Workspace() { cudaFreeHost(ws.offsets_host); }
};

std::vector<int32_t> download_i32(const void* dev, size_t n) {
  std::vector<int32_t> v(n);
  REQUIRE(cudaMemcpy(v.data(), dev, n * sizeof(int32_t), cudaMemcpyDeviceToHost) == cudaSuccess);
  return v;
}

}  // namespace

TEST_SUITE("host") {
TEST_CASE("reference moe_block: the routing of model/moe_routing.h and the experts' sum in f32") {
  std::mt19937 rng(31);
  const int n = 9, H = 16, I = 8, E = 6, K = 2;
  const Vec x = random_vec(n * H, -1, 1, DType::F32, rng), rw = random_vec(E * H, -1, 1, DType::F32, rng);
  const Vec gu = random_vec(E * 2 * I * H, -0.3, 0.3, DType::F32, rng), dw = random_vec(E * H * I, -0.3, 0.3, DType::F32, rng);
  std::vector<int32_t> ref_ids;
  const Vec ref = ref::moe_block(x, rw, gu, dw, Activation::Silu, n, H, I, E, K, &ref_ids);
  const Vec logits = ref::linear(x, rw, {}, 0, n, E, H);
  std::vector<float> lf(logits.begin(), logits.end());
  std::vector<int32_t> ids(n * K);
  std::vector<float> w(n * K);
  for (int t = 0; t < n; ++t) route_top_k(lf.data() + t * E, E, K, ids.data() + t * K, w.data() + t * K);
  CHECK(ids == ref_ids);
  const MoePermutation p = moe_permutation(ids.data(), n * K, E);
  Vec out(static_cast<size_t>(n) * H, 0.0);
  for (int i = 0; i < n * K; ++i) {  // each entry's expert output, at its row of the expert's group
    const int t = i / K, e = ids[i];
    CHECK(p.slots[i] >= p.offsets[e]);
    CHECK(p.slots[i] < p.offsets[e] + p.counts[e]);
    const Vec xt(x.begin() + t * H, x.begin() + (t + 1) * H);
    const Vec g(gu.begin() + e * 2 * I * H, gu.begin() + (e + 1) * 2 * I * H), d(dw.begin() + e * H * I, dw.begin() + (e + 1) * H * I);
    const Vec y = ref::linear(ref::activation(ref::linear(xt, g, {}, 0, 1, 2 * I, H), {}, Activation::Silu, true, 1, I), d, {}, 0, 1, H, I);
    for (int h = 0; h < H; ++h) out[t * H + h] += w[i] * y[h];
  }
  check_close("reference moe_block vs route_top_k", out, ref, {1e-5, 1e-5, 1e-6});
}
}

TEST_CASE("moe_route and moe_permute: ids, weights and permutation of model/moe_routing.h") {
  std::mt19937 rng(29);
  struct Case { int n, experts, top_k; };
  for (const Case c : {Case{37, 8, 2}, Case{300, 8, 2}, Case{17, 40, 3}, Case{5, 1, 1}, Case{9, 64, 8}, Case{3, 1024, 4}}) {
    const std::string what = "n " + std::to_string(c.n) + " experts " + std::to_string(c.experts) + " top_k " + std::to_string(c.top_k);
    CAPTURE(what);
    const Vec logits = random_vec(static_cast<size_t>(c.n) * c.experts, -3, 3, DType::F32, rng);
    const std::vector<float> lf(logits.begin(), logits.end());
    Buf d_logits = upload(logits, DType::F32);
    const size_t entries = static_cast<size_t>(c.n) * c.top_k;
    DeviceBuffer d_ids(entries * 4), d_w(entries * 4), d_slots(entries * 4), d_off((2 * c.experts + 1) * 4);
    cuda::moe_route(d_logits->as<float>(), c.n, c.experts, c.top_k, d_ids.as<int32_t>(), d_w.as<float>(), nullptr);
    cuda::moe_permute(d_ids.as<int32_t>(), static_cast<int>(entries), c.experts, d_off.as<int32_t>(),
                      d_off.as<int32_t>() + c.experts + 1, d_slots.as<int32_t>(), nullptr);
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    std::vector<int32_t> ids(entries);
    std::vector<float> w(entries);
    for (int t = 0; t < c.n; ++t)
      route_top_k(lf.data() + static_cast<size_t>(t) * c.experts, c.experts, c.top_k, ids.data() + t * c.top_k,
                  w.data() + t * c.top_k);
    CHECK(download_i32(d_ids.ptr, entries) == ids);
    const Vec gw = download(d_w.ptr, entries, DType::F32);
    for (size_t i = 0; i < entries; ++i) CHECK(std::abs(gw[i] - w[i]) <= 1e-6);
    const MoePermutation p = moe_permutation(ids.data(), static_cast<int64_t>(entries), c.experts);
    const std::vector<int32_t> off = download_i32(d_off.ptr, 2 * c.experts + 1);
    CHECK(std::vector<int32_t>(off.begin(), off.begin() + c.experts + 1) == p.offsets);
    CHECK(std::vector<int32_t>(off.begin() + c.experts + 1, off.end()) == p.counts);
    CHECK(download_i32(d_slots.ptr, entries) == p.slots);
  }
}

TEST_CASE("moe_block: exact rows and masked, f32 and bf16, vs the reference") {
  std::mt19937 rng(30);
  cuda::Gemm gemm;
  struct Case { int experts, top_k, hidden, inter; };
  for (const Case c : {Case{8, 2, 64, 48}, Case{4, 1, 32, 40}, Case{8, 2, 128, 96}}) {
    for (DType t : {DType::F32, DType::BF16}) {
      const int max_tokens = 40;
      Workspace ws(max_tokens, c.experts, c.top_k, c.hidden, c.inter, t);
      const int E = c.experts, H = c.hidden, I = c.inter;
      const Vec rw = random_vec(static_cast<size_t>(E) * H, -1, 1, t, rng);
      const Vec gu = random_vec(static_cast<size_t>(E) * 2 * I * H, -0.2, 0.2, t, rng);
      const Vec dw = random_vec(static_cast<size_t>(E) * H * I, -0.2, 0.2, t, rng);
      Buf d_rw = upload(rw, t), d_gu = upload(gu, t), d_dw = upload(dw, t);
      for (int n : {1, 2, 5, 40}) {
        const Vec x = random_vec(static_cast<size_t>(n) * H, -1, 1, t, rng);
        const Vec ref = ref::moe_block(x, rw, gu, dw, Activation::Silu, n, H, I, E, c.top_k);
        Buf d_x = upload(x, t);
        for (bool exact : {true, false}) {
          DeviceBuffer d_out(static_cast<size_t>(n) * H * dtype_size(t));
          cuda::MoeBlockArgs a;
          a.x = d_x->ptr;
          a.router_w = d_rw->ptr;
          a.gate_up_w = d_gu->ptr;
          a.down_w = d_dw->ptr;
          a.out = d_out.ptr;
          a.n = n;
          a.hidden = H;
          a.inter = I;
          a.experts = E;
          a.top_k = c.top_k;
          a.dtype = t;
          a.act = Activation::Silu;
          a.exact_rows = exact;
          a.tuning = cuda::gemv_tuning_for(1);
          a.ws = ws.ws;
          cuda::moe_block(a, gemm, nullptr);
          REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
          Tolerance tol = t == DType::F32 ? Tolerance{1e-4, 1e-4, 1e-5} : tol_for(t);
          check_close(std::string("moe_block ") + name_of(t) + (exact ? " exact rows" : " masked") + " experts " +
                          std::to_string(E) + " top_k " + std::to_string(c.top_k) + " n " + std::to_string(n),
                      download(d_out.ptr, ref.size(), t), ref, tol);
        }
      }
    }
  }
}
