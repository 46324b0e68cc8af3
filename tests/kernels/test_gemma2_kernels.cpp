// test_gemma2_kernels.cpp: the kernel paths Gemma 2 adds, against tests/reference: the attention score
// soft-cap in the tiled kernel (one split and split-K, global and windowed) and in the decode kernel (its
// cache loop, the fused new-key path, split merges), add_norm's post-norm of add0 and (1 + w) weights,
// the scaled embedding, and the logits soft-cap.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "kernels/attention.cuh"
#include "kernels/embedding.cuh"
#include "kernels/norm.cuh"
#include "kernels/softcap.cuh"
#include "tests/kernels/test_util.h"
#include "tests/reference/reference.h"

using namespace tpshard;
using namespace tpshard::test;

namespace {

const DType kDtypes[] = {DType::F32, DType::F16, DType::BF16};

/// One sequence of `len` positions in kv_cache slot 1 (of 2), K/V random, written straight into the
/// cache layout [slot, kv_head, position, head_dim]; ks / vs hold it as [position, kv_head, head_dim].
struct CachedSequence {
  int hd, kv, len, max_seq;
  DType t;
  Vec ks, vs;
  Buf k_cache, v_cache;

  CachedSequence(int hd_, int kv_, int len_, DType t_, std::mt19937& rng)
      : hd(hd_), kv(kv_), len(len_), max_seq(len_ + 3), t(t_) {
    ks = random_vec(static_cast<size_t>(len) * kv * hd, -2, 2, t, rng);
    vs = random_vec(static_cast<size_t>(len) * kv * hd, -2, 2, t, rng);
    Vec kc(static_cast<size_t>(2) * kv * max_seq * hd, 0.0), vc = kc;
    for (int p = 0; p < len; ++p)
      for (int j = 0; j < kv; ++j)
        for (int d = 0; d < hd; ++d) {
          const size_t at = ((static_cast<size_t>(1) * kv + j) * max_seq + p) * hd + d;
          kc[at] = ks[(static_cast<size_t>(p) * kv + j) * hd + d];
          vc[at] = vs[(static_cast<size_t>(p) * kv + j) * hd + d];
        }
    k_cache = upload(kc, t);
    v_cache = upload(vc, t);
  }
};

}  // namespace

TEST_CASE("attention soft-cap: tiled kernel (1 and 3 splits, global and window 6) and decode kernel (splits, fused new key)") {
  std::mt19937 rng(21);
  const float cap = 5.0f;  // scores reach ~10 here: the cap changes every row
  for (DType t : kDtypes) {
    for (int hd : {32, 256}) {
      const int heads = 4, kv = 2, len = 37;
      const double scale = 1.0 / std::sqrt(static_cast<double>(hd)) * 2.0;
      CachedSequence seq(hd, kv, len, t, rng);
      const int64_t stride = static_cast<int64_t>(heads + 2 * kv) * hd;
      const std::string base = std::string(name_of(t)) + " hd " + std::to_string(hd);

      // prefill: every position of the sequence queries the cache (already holding all its keys)
      std::vector<int32_t> pos(len), slot(len, 1);
      for (int p = 0; p < len; ++p) pos[p] = p;
      const Vec qkv = random_vec(static_cast<size_t>(len) * stride, -2, 2, t, rng);
      Buf d_qkv = upload(qkv, t), d_pos = upload_i32(pos), d_slot = upload_i32(slot);
      const std::vector<const Vec*> sk(len, &seq.ks), sv(len, &seq.vs);
      for (int window : {0, 6}) {
        const Vec ref = ref::attention(qkv, stride, sk, sv, pos, heads, kv, hd, scale, 0, 0, cap, window);
        const Vec uncapped = ref::attention(qkv, stride, sk, sv, pos, heads, kv, hd, scale, 0, 0, 0, window);
        double moved = 0;  // the cap must matter for this test to mean anything
        for (size_t i = 0; i < ref.size(); ++i) moved = std::max(moved, std::abs(ref[i] - uncapped[i]));
        CHECK(moved > 0.1);
        for (int splits : {1, 3}) {
          DeviceBuffer out(static_cast<size_t>(len) * heads * hd * 4);
          DeviceBuffer partial(static_cast<size_t>(len) * heads * splits * (hd + 2) * 4);
          cuda::AttentionParams ap;
          ap.q = d_qkv->ptr;
          ap.q_stride = stride;
          ap.k_cache = seq.k_cache->ptr;
          ap.v_cache = seq.v_cache->ptr;
          ap.slots = d_slot->as<int32_t>();
          ap.positions = d_pos->as<int32_t>();
          ap.out = out.ptr;
          ap.partial = partial.as<float>();
          ap.dtype = t;
          ap.n = len;
          ap.num_heads = heads;
          ap.num_kv_heads = kv;
          ap.head_dim = hd;
          ap.max_seq_len = seq.max_seq;
          ap.num_splits = splits;
          ap.scale = static_cast<float>(scale);
          ap.softcap = cap;
          ap.window = window;
          cuda::attention_tiled(ap, nullptr);
          check_close("tiled softcap " + base + " window " + std::to_string(window) + " splits " + std::to_string(splits),
                      download(out.ptr, ref.size(), t), ref, tol_for(t));
        }
      }

      // decode: one token at the last position; from the cache (decode), or with its own K/V taken from
      // its QKV row and appended by the kernel (rotary_append with no rotary dims: the fused new-key path)
      for (bool fused : {false, true}) {
        const std::vector<int32_t> dpos = {len - 1}, dslot = {1};
        const Vec row = random_vec(static_cast<size_t>(stride), -2, 2, t, rng);
        Vec ks = seq.ks, vs = seq.vs;
        if (fused)  // the new key / value of position len - 1 are the row's K / V heads (the kernel appends them)
          for (int j = 0; j < kv; ++j)
            for (int d = 0; d < hd; ++d) {
              ks[(static_cast<size_t>(len - 1) * kv + j) * hd + d] = row[(heads + j) * hd + d];
              vs[(static_cast<size_t>(len - 1) * kv + j) * hd + d] = row[(heads + kv + j) * hd + d];
            }
        for (int window : {0, 6}) {
          const Vec ref = ref::attention(row, stride, {&ks}, {&vs}, dpos, heads, kv, hd, scale, 0, 0, cap, window);
          for (int splits : {1, 4}) {
            for (bool counters : {false, true}) {
              Buf d_row = upload(row, t), d_dpos = upload_i32(dpos), d_dslot = upload_i32(dslot);
              DeviceBuffer out(static_cast<size_t>(heads) * hd * 4);
              DeviceBuffer partial(static_cast<size_t>(heads) * splits * (hd + 2) * 4);
              DeviceBuffer split_counters(static_cast<size_t>(heads) * 4);
              cuda::AttentionParams ap;
              ap.q = d_row->ptr;
              ap.q_stride = stride;
              ap.k_cache = seq.k_cache->ptr;
              ap.v_cache = seq.v_cache->ptr;
              ap.slots = d_dslot->as<int32_t>();
              ap.positions = d_dpos->as<int32_t>();
              ap.out = out.ptr;
              ap.partial = partial.as<float>();
              ap.split_counters = counters ? split_counters.as<int>() : nullptr;
              ap.dtype = t;
              ap.n = 1;
              ap.num_heads = heads;
              ap.num_kv_heads = kv;
              ap.head_dim = hd;
              ap.max_seq_len = seq.max_seq;
              ap.num_splits = splits;
              ap.scale = static_cast<float>(scale);
              ap.softcap = cap;
              ap.window = window;
              ap.decode = true;
              ap.rotary_append = fused;  // rotary_ndims 0: K appended unrotated
              cuda::attention(ap, nullptr);
              check_close("decode softcap " + base + (fused ? " fused" : " cache") + " window " + std::to_string(window) +
                              " splits " + std::to_string(splits) + (counters ? " counters" : " combine kernel"),
                          download(out.ptr, ref.size(), t), ref, tol_for(t));
            }
          }
        }
      }
    }
  }
}

TEST_CASE("add_norm: Gemma 2 post-norm of add0 (with its bias) and (1 + w) weights; the adds-only call") {
  std::mt19937 rng(22);
  for (DType t : kDtypes) {
    for (int hidden : {64, 1000, 2304}) {
      const int n = 3;
      const double eps = 1e-6;
      Vec residual = round_to(random_vec(static_cast<size_t>(n) * hidden, -30, 30, DType::F32, rng), DType::F32);
      const Vec add0 = random_vec(static_cast<size_t>(n) * hidden, -3, 3, t, rng);
      const Vec b0 = random_vec(hidden, -1, 1, t, rng), b1 = random_vec(hidden, -1, 1, t, rng);
      const Vec wa = random_vec(hidden, -0.5, 0.5, t, rng), w0 = random_vec(hidden, -0.5, 0.5, t, rng);
      for (bool with_out : {true, false}) {
        Buf d_res = upload(residual, DType::F32), d_add = upload(add0, t), d_b0 = upload(b0, t), d_b1 = upload(b1, t);
        Buf d_wa = upload(wa, t), d_w0 = upload(w0, t);
        DeviceBuffer out0(static_cast<size_t>(n) * hidden * 4);
        cuda::AddNormParams p;
        p.residual = d_res->as<float>();
        p.add0 = d_add->ptr;
        p.add0_weight = d_wa->ptr;
        p.add_bias0 = d_b0->ptr;
        p.add_bias1 = d_b1->ptr;
        p.weight0 = with_out ? d_w0->ptr : nullptr;
        p.out0 = with_out ? out0.ptr : nullptr;
        p.dtype = t;
        p.kind = NormKind::RmsNorm;
        p.eps = static_cast<float>(eps);
        p.weight_offset = 1.f;
        p.n = n;
        p.hidden = hidden;
        cuda::add_norm(p, nullptr);
        // a = add0 + bias0, normalized with (1 + wa), rounded to dtype; residual += that + bias1
        Vec a = add0;
        for (int r = 0; r < n; ++r)
          for (int i = 0; i < hidden; ++i) a[static_cast<size_t>(r) * hidden + i] += b0[i];
        const Vec normed = round_to(ref::rms_norm(a, wa, 1.0, eps, n, hidden), t);
        Vec w0_plus1 = w0;
        for (double& w : w0_plus1) w += 1.0;
        Vec res_ref = residual;
        const Vec ref0 = ref::add_norm(res_ref, normed, {}, b1, w0_plus1, {}, NormKind::RmsNorm, eps, n, hidden);
        const std::string what = std::string("post-norm ") + name_of(t) + " hidden " + std::to_string(hidden) +
                                 (with_out ? "" : " adds only");
        // the normed add is rounded to dtype: one unit of it may differ where f32 and double round apart
        check_close(what + " residual", download(d_res->ptr, res_ref.size(), DType::F32), res_ref, tol_for(t));
        if (with_out) check_close(what + " out0", download(out0.ptr, ref0.size(), t), ref0, tol_for(t));
      }
    }
  }
}

TEST_CASE("embedding scale: rows times sqrt(hidden) in the activation dtype, product rounded to it") {
  std::mt19937 rng(23);
  for (DType t : kDtypes) {
    const int hidden = 96, vpr = 11;
    const Vec table = random_vec(static_cast<size_t>(vpr) * hidden, -1, 1, t, rng);
    const std::vector<int32_t> tokens = {3, 10, 11, 0, 25};  // 11 and 25: another rank's rows
    Buf d_table = upload(table, t), d_tok = upload_i32(tokens);
    DeviceBuffer out(tokens.size() * hidden * 4);
    const float scale = static_cast<float>(std::sqrt(3584.0));  // Gemma-2-9B: 59.87, 60 in bf16
    cuda::EmbeddingParams p;
    p.tokens = d_tok->as<int32_t>();
    p.table = d_table->ptr;
    p.out = out.as<float>();
    p.dtype = t;
    p.n = static_cast<int>(tokens.size());
    p.hidden = hidden;
    p.vocab_begin = 0;
    p.vocab_per_rank = vpr;
    p.scale = scale;
    cuda::embedding_lookup(p, nullptr);
    const double s = round_to({static_cast<double>(scale)}, t)[0];
    Vec ref = ref::embedding(tokens, table, hidden, 0, vpr);
    for (double& x : ref) x *= s;
    // products of two dtype values are exact in f32 (at most 24 significant bits): one rounding, as here
    check_close(std::string("embedding scale ") + name_of(t), download(out.ptr, ref.size(), DType::F32), round_to(ref, t),
                {0, 0, 0});
  }
}

TEST_CASE("softcap_f32: cap * tanh(x / cap) in place; a cap of 0 is refused") {
  std::mt19937 rng(24);
  for (int64_t n : {1, 1000, 300001}) {
    const Vec x = random_vec(static_cast<size_t>(n), -120, 120, DType::F32, rng);
    Buf d = upload(x, DType::F32);
    cuda::softcap_f32(d->as<float>(), n, 30.f, nullptr);
    check_close("softcap n " + std::to_string(n), download(d->ptr, x.size(), DType::F32), ref::softcap(x, 30.0),
                {1e-5, 1e-5, 1e-6});
  }
  Buf d = upload({1.0}, DType::F32);
  CHECK_THROWS(cuda::softcap_f32(d->as<float>(), 1, 0.f, nullptr));
}
