// test_attention_decode.cpp: the decode attention kernel (kernels/attention_decode.cu) against the CPU
// reference (tests/reference/attention.cpp), against the tiled kernel, and fused (rotary + kv_cache
// append inside) against unfused (apply_rotary, kv_cache_append, then attention). Awkward shapes:
// head_dim 64/80/96/128/256, GQA 1/2/4/8, contexts 1, 2, 31, 33, 160, 300, 1000, 4097 (one token), 3 tokens
// plus 2 padding tokens in a scratch slot, 48 tokens at different positions; splits 1/3/16 with and
// without split_counters (16 splits: two merge rounds of 8; context 300: 8 + 2); f32/f16/bf16.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>

#include "model/model_config.h"
#include "kernels/attention.cuh"
#include "kernels/attention_decode.cuh"
#include "kernels/kv_cache.cuh"
#include "kernels/rotary.cuh"
#include "runtime/rope.h"
#include "tests/kernels/test_util.h"
#include "tests/reference/reference.h"

using namespace tpshard;
using namespace tpshard::test;

namespace {

struct DecodeShape {
  int hd, rot, heads, kv;
  int group = 0, offset = 0;  ///< AttentionParams::kv_group / head_offset (a rank of an uneven split)
};

/// One decode step: token i is in kv_cache slot slot[i] at position pos[i]. Tokens in the scratch slot
/// (padding) have identical rows and position 0, as the runner pads.
struct DecodeBatch {
  std::string name;
  std::vector<int32_t> slot, pos;
  int slots = 0, max_seq = 0, scratch = -1;
};

std::vector<DecodeBatch> decode_batches() {
  std::vector<DecodeBatch> out;
  for (int ctx : {1, 2, 31, 33, 160, 300, 1000, 4097}) out.push_back({"1 token, context " + std::to_string(ctx), {1}, {ctx - 1}, 2, ctx + 3});
  out.push_back({"3 tokens (contexts 2, 1000, 33) + 2 padding", {2, 0, 1, 3, 3}, {1, 999, 32, 0, 0}, 4, 1003, 3});
  DecodeBatch b48{"48 tokens, contexts 1..200", {}, {}, 48, 200};
  std::mt19937 rng(48);
  const int fixed[] = {1, 2, 31, 33, 160, 200};
  for (int i = 0; i < 48; ++i) {
    b48.slot.push_back((i * 29 + 5) % 48);  // a permutation of the slots
    b48.pos.push_back((i < 6 ? fixed[i] : 1 + static_cast<int>(rng() % 200)) - 1);
  }
  out.push_back(b48);
  return out;
}

/// Rotary as the kernels compute it: angle pos * inv_freq[i] rounded to fp32 (as on the GPU; the
/// rotation itself in double), result rounded to dtype. Q and K heads of every row, in place.
void rotate_rows(Vec& qkv, int64_t stride, const std::vector<int32_t>& pos, const std::vector<float>& inv,
                 const DecodeShape& s, DType t) {
  const int half = s.rot / 2;
  for (size_t i = 0; i < pos.size(); ++i)
    for (int h = 0; h < s.heads + s.kv; ++h) {
      double* x = &qkv[i * stride + static_cast<size_t>(h) * s.hd];
      for (int j = 0; j < half; ++j) {
        const double a = static_cast<double>(static_cast<float>(pos[i]) * inv[j]);
        const double x1 = x[j], x2 = x[j + half];
        x[j] = x1 * std::cos(a) - x2 * std::sin(a);
        x[j + half] = x2 * std::cos(a) + x1 * std::sin(a);
      }
    }
  qkv = round_to(qkv, t);
}

/// Everything one (dtype, shape, batch, rotary) case needs: inputs on host and device, the expected
/// kv_cache after the step and the reference output.
struct DecodeCase {
  DType t;
  DecodeShape s;
  const DecodeBatch* b;
  bool rotary;
  int n = 0;
  int64_t stride = 0;
  size_t cache_elems = 0, out_elems = 0;
  Vec qkv, k0, v0, k_expect, v_expect, ref;
  std::vector<float> inv;
  Buf d_qkv, d_k0, d_v0, d_slot, d_pos, d_inv;
  std::string what;

  DecodeCase(DType t_, DecodeShape s_, const DecodeBatch& b_, bool rotary_, std::mt19937& rng)
      : t(t_), s(s_), b(&b_), rotary(rotary_) {
    n = static_cast<int>(b->slot.size());
    stride = static_cast<int64_t>(s.heads + 2 * s.kv) * s.hd;
    cache_elems = static_cast<size_t>(b->slots) * s.kv * b->max_seq * s.hd;
    out_elems = static_cast<size_t>(n) * s.heads * s.hd;
    qkv = random_vec(n * stride, -2, 2, t, rng);
    for (int i = 1; i < n; ++i)
      if (b->slot[i] == b->scratch && b->slot[i - 1] == b->scratch) std::copy_n(qkv.begin() + (i - 1) * stride, stride, qkv.begin() + i * stride);
    k0 = random_vec(cache_elems, -2, 2, t, rng);
    v0 = random_vec(cache_elems, -2, 2, t, rng);
    ModelConfig mc;
    mc.rotary_ndims = s.rot;
    mc.head_dim = 256;  // rope_inv_freq checks rotary_ndims <= head_dim
    mc.rope_theta = 10000.0;
    inv = rotary && s.rot > 0 ? rope_inv_freq(mc) : std::vector<float>{0.f};
    what = std::string(name_of(t)) + " hd " + std::to_string(s.hd) + " heads " + std::to_string(s.heads) + "/" +
           std::to_string(s.kv) + (rotary ? " rotary " + std::to_string(s.rot) + " fused" : " unfused") + ", " + b->name;
    expect();
    d_qkv = upload(qkv, t);
    d_k0 = upload(k0, t);
    d_v0 = upload(v0, t);
    d_slot = upload_i32(b->slot);
    d_pos = upload_i32(b->pos);
    d_inv = upload(Vec(inv.begin(), inv.end()), DType::F32);
  }

  size_t at(int slot, int kvh, int p, int d) const {
    return ((static_cast<size_t>(slot) * s.kv + kvh) * b->max_seq + p) * s.hd + d;
  }

  /// Expected kv_cache (rotary: the step's rotated K / V written at pos) and the reference output over it.
  void expect() {
    Vec q = qkv;
    if (rotary && s.rot > 0) rotate_rows(q, stride, b->pos, inv, s, t);
    k_expect = k0;
    v_expect = v0;
    if (rotary)
      for (int i = 0; i < n; ++i)
        for (int j = 0; j < s.kv; ++j)
          for (int d = 0; d < s.hd; ++d) {
            k_expect[at(b->slot[i], j, b->pos[i], d)] = q[i * stride + (s.heads + j) * s.hd + d];
            v_expect[at(b->slot[i], j, b->pos[i], d)] = q[i * stride + (s.heads + s.kv + j) * s.hd + d];
          }
    std::vector<Vec> ks(b->slots), vs(b->slots);  // per slot [max_seq, kv, hd], as ref::attention reads
    for (int sl = 0; sl < b->slots; ++sl) {
      ks[sl].resize(static_cast<size_t>(b->max_seq) * s.kv * s.hd);
      vs[sl].resize(ks[sl].size());
      for (int p = 0; p < b->max_seq; ++p)
        for (int j = 0; j < s.kv; ++j)
          for (int d = 0; d < s.hd; ++d) {
            ks[sl][(static_cast<size_t>(p) * s.kv + j) * s.hd + d] = k_expect[at(sl, j, p, d)];
            vs[sl][(static_cast<size_t>(p) * s.kv + j) * s.hd + d] = v_expect[at(sl, j, p, d)];
          }
    }
    std::vector<const Vec*> seq_k(n), seq_v(n);
    for (int i = 0; i < n; ++i) {
      seq_k[i] = &ks[b->slot[i]];
      seq_v[i] = &vs[b->slot[i]];
    }
    ref = ref::attention(q, stride, seq_k, seq_v, b->pos, s.heads, s.kv, s.hd, scale(), s.group, s.offset);
  }

  double scale() const { return 1.0 / std::sqrt(static_cast<double>(s.hd)); }

  cuda::AttentionParams params(int splits) const {
    cuda::AttentionParams a;
    a.q = d_qkv->ptr;
    a.q_stride = stride;
    a.slots = d_slot->as<int32_t>();
    a.positions = d_pos->as<int32_t>();
    a.dtype = t;
    a.n = n;
    a.num_heads = s.heads;
    a.num_kv_heads = s.kv;
    a.kv_group = s.group;
    a.head_offset = s.offset;
    a.head_dim = s.hd;
    a.max_seq_len = b->max_seq;
    a.num_splits = splits;
    a.scale = static_cast<float>(scale());
    a.decode = true;
    a.rotary_append = rotary;
    a.inv_freq = d_inv->as<float>();
    a.rotary_ndims = rotary ? s.rot : 0;
    return a;
  }
};

/// Output and kv_cache of one attention call on fresh copies of the case's kv_cache.
struct RunResult {
  Vec out, k, v;
};

enum class Kernel { Decode, Tiled, Dispatch };

RunResult run(const DecodeCase& c, Kernel kernel, int splits, int* counters, bool with_cache) {
  const size_t bytes = c.cache_elems * dtype_size(c.t);
  DeviceBuffer k(bytes), v(bytes), out(c.out_elems * dtype_size(c.t));
  DeviceBuffer partial(static_cast<size_t>(c.n) * c.s.heads * splits * (c.s.hd + 2) * sizeof(float));
  REQUIRE(cudaMemcpy(k.ptr, c.d_k0->ptr, bytes, cudaMemcpyDeviceToDevice) == cudaSuccess);
  REQUIRE(cudaMemcpy(v.ptr, c.d_v0->ptr, bytes, cudaMemcpyDeviceToDevice) == cudaSuccess);
  cuda::AttentionParams a = c.params(splits);
  a.k_cache = k.ptr;
  a.v_cache = v.ptr;
  a.out = out.ptr;
  a.partial = partial.as<float>();
  a.split_counters = counters;
  if (kernel == Kernel::Decode) cuda::attention_decode(a, nullptr);
  else if (kernel == Kernel::Tiled) cuda::attention_tiled(a, nullptr);
  else cuda::attention(a, nullptr);
  RunResult r;
  r.out = download(out.ptr, c.out_elems, c.t);
  if (with_cache) {
    r.k = download(k.ptr, c.cache_elems, c.t);
    r.v = download(v.ptr, c.cache_elems, c.t);
  }
  return r;
}

/// Unfused decode step: apply_rotary on a copy of the QKV rows, kv_cache_append, then the decode
/// kernel without rotary_append.
RunResult run_unfused(const DecodeCase& c, int splits) {
  Buf q = upload(c.qkv, c.t);
  const size_t bytes = c.cache_elems * dtype_size(c.t);
  DeviceBuffer k(bytes), v(bytes), out(c.out_elems * dtype_size(c.t));
  DeviceBuffer partial(static_cast<size_t>(c.n) * c.s.heads * splits * (c.s.hd + 2) * sizeof(float));
  REQUIRE(cudaMemcpy(k.ptr, c.d_k0->ptr, bytes, cudaMemcpyDeviceToDevice) == cudaSuccess);
  REQUIRE(cudaMemcpy(v.ptr, c.d_v0->ptr, bytes, cudaMemcpyDeviceToDevice) == cudaSuccess);
  cuda::AttentionParams a = c.params(splits);
  if (c.s.rot > 0) {
    cuda::RotaryParams rp;
    rp.qkv = q->ptr;
    rp.row_stride = c.stride;
    rp.positions = a.positions;
    rp.inv_freq = a.inv_freq;
    rp.dtype = c.t;
    rp.n = c.n;
    rp.num_heads = c.s.heads;
    rp.num_kv_heads = c.s.kv;
    rp.head_dim = c.s.hd;
    rp.rotary_ndims = c.s.rot;
    cuda::apply_rotary(rp, nullptr);
  }
  cuda::KvAppendParams kp;
  kp.qkv = q->ptr;
  kp.row_stride = c.stride;
  kp.k_cache = k.ptr;
  kp.v_cache = v.ptr;
  kp.slots = a.slots;
  kp.positions = a.positions;
  kp.dtype = c.t;
  kp.n = c.n;
  kp.num_heads = c.s.heads;
  kp.num_kv_heads = c.s.kv;
  kp.head_dim = c.s.hd;
  kp.max_seq_len = c.b->max_seq;
  cuda::kv_cache_append(kp, nullptr);
  a.q = q->ptr;
  a.k_cache = k.ptr;
  a.v_cache = v.ptr;
  a.out = out.ptr;
  a.partial = partial.as<float>();
  a.rotary_append = false;
  cuda::attention_decode(a, nullptr);
  return {download(out.ptr, c.out_elems, c.t), download(k.ptr, c.cache_elems, c.t), download(v.ptr, c.cache_elems, c.t)};
}

void check_case(const DecodeCase& c) {
  const Tolerance exact{0, 0, 0};
  const RunResult tiled = run(c, Kernel::Tiled, 1, nullptr, true);
  DeviceBuffer counters(static_cast<size_t>(c.n) * c.s.heads * sizeof(int32_t));
  for (int splits : {1, 3, 16}) {
    const std::string w = c.what + ", splits " + std::to_string(splits);
    const RunResult r = run(c, Kernel::Decode, splits, nullptr, true);
    check_close("decode vs reference: " + w, r.out, c.ref, tol_for(c.t));
    check_close("decode vs tiled kernel: " + w, r.out, tiled.out, tol_for(c.t));
    // the kv_cache after the step: the appended K/V exactly where the reference put them (fused), the
    // bytes of the tiled kernel's fused append (both round through rotated()), nothing else touched
    check_close("kv_cache k vs reference: " + w, r.k, c.k_expect, tol_for(c.t));
    check_close("kv_cache v vs reference: " + w, r.v, c.v_expect, exact);
    check_close("kv_cache k vs tiled kernel: " + w, r.k, tiled.k, exact);
    check_close("kv_cache v vs tiled kernel: " + w, r.v, tiled.v, exact);
    if (splits == 1) {
      // attention() sends decode steps here
      check_close("attention() dispatch: " + w, run(c, Kernel::Dispatch, 1, nullptr, false).out, r.out, exact);
      if (c.rotary) {
        const RunResult u = run_unfused(c, 1);
        check_close("fused vs unfused output: " + w, r.out, u.out, tol_for(c.t));
        check_close("fused vs unfused kv_cache k: " + w, r.k, u.k, exact);
        check_close("fused vs unfused kv_cache v: " + w, r.v, u.v, exact);
      }
      continue;
    }
    // the merge by the last block of each (token, head): the same bits as the combine kernel, and the
    // counters back at zero (twice in a row, as in consecutive layers)
    for (int rep = 0; rep < 2; ++rep) {
      const RunResult m = run(c, Kernel::Decode, splits, counters.as<int32_t>(), false);
      check_close("in-kernel split merge vs combine kernel: " + w, m.out, r.out, exact);
      const Vec cnt = download(counters.ptr, static_cast<size_t>(c.n) * c.s.heads, DType::F32);
      CHECK_MESSAGE(std::all_of(cnt.begin(), cnt.end(), [](double x) { return x == 0.0; }),
                    "split_counters not back at zero: " << w);
    }
  }
}

}  // namespace

TEST_CASE("decode attention kernel: reference, tiled kernel, fused vs unfused, split merges, awkward shapes") {
  const std::vector<DecodeBatch> batches = decode_batches();
  std::mt19937 rng(7);
  for (DType t : {DType::F32, DType::F16, DType::BF16})
    for (DecodeShape s : {DecodeShape{64, 64, 8, 8}, DecodeShape{80, 20, 8, 2}, DecodeShape{96, 96, 4, 2},
                          DecodeShape{128, 32, 8, 1}, DecodeShape{256, 64, 4, 4}, DecodeShape{64, 64, 11, 3, 8, 6}})
      for (const DecodeBatch& b : batches)
        for (bool rotary : {false, true}) {
          const DecodeCase c(t, s, b, rotary, rng);
          check_case(c);
        }
}

TEST_CASE("decode attention: splits used for the real context, supported shapes" * doctest::test_suite("host")) {
  CHECK(cuda::attention_decode_splits(1, 16) == 1);
  CHECK(cuda::attention_decode_splits(32, 16) == 1);
  CHECK(cuda::attention_decode_splits(33, 16) == 2);
  CHECK(cuda::attention_decode_splits(160, 16) == 5);
  CHECK(cuda::attention_decode_splits(160, 3) == 3);
  CHECK(cuda::attention_decode_splits(300, 16) == 10);
  CHECK(cuda::attention_decode_splits(4097, 16) == 16);
  CHECK(cuda::attention_decode_splits(4097, 1) == 1);
  cuda::AttentionParams p;
  p.dtype = DType::F16;
  p.k_cache = reinterpret_cast<void*>(uintptr_t{4096});
  p.v_cache = reinterpret_cast<void*>(uintptr_t{8192});
  for (int hd : {64, 80, 96, 128, 256}) {
    p.head_dim = hd;
    CHECK(cuda::attention_decode_supported(p));
  }
  p.head_dim = 66;  // not a multiple of 4: the tiled kernel
  CHECK_FALSE(cuda::attention_decode_supported(p));
  p.head_dim = 64;
  p.v_cache = reinterpret_cast<void*>(uintptr_t{8192 + 2});  // one f16 element off
  CHECK_FALSE(cuda::attention_decode_supported(p));
  p.dtype = DType::F32;
  p.v_cache = reinterpret_cast<void*>(uintptr_t{8192 + 8});  // 8 bytes: not 4 f32 elements
  CHECK_FALSE(cuda::attention_decode_supported(p));
}
