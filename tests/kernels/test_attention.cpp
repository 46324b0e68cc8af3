// test_attention.cpp: kv_cache append and varlen causal attention (prefill-packed and split-K)
// against tests/reference, head_dim 64/80/128 and GQA ratios 1, 4, 6; the decode kernel with rotary and
// the kv_cache append fused in, against the unfused kernels.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>

#include "kernels/attention.cuh"
#include "kernels/kv_cache.cuh"
#include "kernels/rotary.cuh"
#include "model/model_config.h"
#include "runtime/rope.h"
#include "tests/kernels/test_util.h"
#include "tests/reference/reference.h"

using namespace tpshard;
using namespace tpshard::test;

TEST_CASE("kv_cache_append + attention: packed sequences of different lengths, GQA, split-K") {
  // group / offset: a rank of an uneven split (5 heads starting 2 into a KV group of 4: KV heads 0, 1)
  struct Case { int hd, heads, kv, group = 0, offset = 0; };
  std::mt19937 rng(6);
  for (DType t : {DType::F32, DType::F16, DType::BF16}) {
    for (Case c : {Case{64, 8, 8}, Case{80, 8, 2}, Case{128, 6, 1}, Case{64, 5, 2, 4, 2}, Case{64, 3, 3, 1, 0}}) {
      const int max_seq = 320, slots = 5;
      // sequences: (slot, length); tokens packed without padding, in this order
      const std::vector<std::pair<int, int>> seqs = {{3, 1}, {0, 17}, {4, 130}, {1, 300}};
      std::vector<int32_t> tok_slot, tok_pos;
      for (auto [s, len] : seqs)
        for (int p = 0; p < len; ++p) {
          tok_slot.push_back(s);
          tok_pos.push_back(p);
        }
      const int n = static_cast<int>(tok_slot.size());
      const int64_t stride = static_cast<int64_t>(c.heads + 2 * c.kv) * c.hd;
      const Vec qkv = random_vec(n * stride, -2, 2, t, rng);
      const size_t cache_elems = static_cast<size_t>(slots) * c.kv * max_seq * c.hd;
      Buf d_qkv = upload(qkv, t), d_slot = upload_i32(tok_slot), d_pos = upload_i32(tok_pos);
      DeviceBuffer k_cache(cache_elems * 4), v_cache(cache_elems * 4);
      cuda::KvAppendParams kp;
      kp.qkv = d_qkv->ptr;
      kp.row_stride = stride;
      kp.k_cache = k_cache.ptr;
      kp.v_cache = v_cache.ptr;
      kp.slots = d_slot->as<int32_t>();
      kp.positions = d_pos->as<int32_t>();
      kp.dtype = t;
      kp.n = n;
      kp.num_heads = c.heads;
      kp.num_kv_heads = c.kv;
      kp.head_dim = c.hd;
      kp.max_seq_len = max_seq;
      cuda::kv_cache_append(kp, nullptr);

      // reference K/V per sequence [pos, kv, hd], and the expected cache contents
      std::vector<Vec> ks(slots), vs(slots);
      Vec k_expect(cache_elems, 0.0), v_expect(cache_elems, 0.0);
      for (int i = 0; i < n; ++i) {
        const int s = tok_slot[i], p = tok_pos[i];
        ks[s].resize(static_cast<size_t>(max_seq) * c.kv * c.hd);
        vs[s].resize(static_cast<size_t>(max_seq) * c.kv * c.hd);
        for (int j = 0; j < c.kv; ++j)
          for (int d = 0; d < c.hd; ++d) {
            const double kval = qkv[i * stride + (c.heads + j) * c.hd + d];
            const double vval = qkv[i * stride + (c.heads + c.kv + j) * c.hd + d];
            ks[s][(static_cast<size_t>(p) * c.kv + j) * c.hd + d] = kval;
            vs[s][(static_cast<size_t>(p) * c.kv + j) * c.hd + d] = vval;
            const size_t at = ((static_cast<size_t>(s) * c.kv + j) * max_seq + p) * c.hd + d;
            k_expect[at] = kval;
            v_expect[at] = vval;
          }
      }
      const std::string what = std::string(name_of(t)) + " hd " + std::to_string(c.hd) + " heads " +
                               std::to_string(c.heads) + "/" + std::to_string(c.kv) + " group " +
                               std::to_string(c.group) + " offset " + std::to_string(c.offset);
      check_close("kv_cache k " + what, download(k_cache.ptr, cache_elems, t), k_expect, {0, 0, 0});
      check_close("kv_cache v " + what, download(v_cache.ptr, cache_elems, t), v_expect, {0, 0, 0});

      std::vector<const Vec*> seq_k(n), seq_v(n);
      for (int i = 0; i < n; ++i) {
        seq_k[i] = &ks[tok_slot[i]];
        seq_v[i] = &vs[tok_slot[i]];
      }
      const double scale = 1.0 / std::sqrt(static_cast<double>(c.hd));
      const Vec ref = ref::attention(qkv, stride, seq_k, seq_v, tok_pos, c.heads, c.kv, c.hd, scale, c.group, c.offset);
      for (int splits : {1, 3, 16}) {
        DeviceBuffer out(static_cast<size_t>(n) * c.heads * c.hd * 4);
        DeviceBuffer partial(static_cast<size_t>(n) * c.heads * splits * (c.hd + 2) * 4);
        cuda::AttentionParams ap;
        ap.q = d_qkv->ptr;
        ap.q_stride = stride;
        ap.k_cache = k_cache.ptr;
        ap.v_cache = v_cache.ptr;
        ap.slots = d_slot->as<int32_t>();
        ap.positions = d_pos->as<int32_t>();
        ap.out = out.ptr;
        ap.partial = partial.as<float>();
        ap.dtype = t;
        ap.n = n;
        ap.num_heads = c.heads;
        ap.num_kv_heads = c.kv;
        ap.kv_group = c.group;
        ap.head_offset = c.offset;
        ap.head_dim = c.hd;
        ap.max_seq_len = max_seq;
        ap.num_splits = splits;
        ap.scale = static_cast<float>(scale);
        cuda::attention(ap, nullptr);
        check_close("attention " + what + " splits " + std::to_string(splits), download(out.ptr, ref.size(), t), ref,
                    tol_for(t));
      }
    }
  }
}

TEST_CASE("attention_num_splits: one split when tokens x heads fill the GPU, more for small decode batches" *
          doctest::test_suite("host")) {
  CHECK(cuda::attention_num_splits(512, 16, 2048, 16) == 1);
  CHECK(cuda::attention_num_splits(1, 8, 2048, 16) > 1);
  CHECK(cuda::attention_num_splits(1, 8, 2048, 16) <= 16);
  CHECK(cuda::attention_num_splits(1, 8, 20, 16) == 1);   // context shorter than two minimum splits
  CHECK(cuda::attention_num_splits(1, 8, 100, 16) == 6);  // at least 16 keys per split
}

TEST_CASE("decode attention with fused rotary + kv_cache append equals rotary, append, then attention") {
  // One token per slot at different positions over a kv_cache that already holds earlier keys, plus two
  // padding tokens in the scratch slot (identical rows, as the runner pads with token 0 at position 0).
  struct Case { int hd, rot, heads, kv; };
  std::mt19937 rng(11);
  for (DType t : {DType::F32, DType::F16, DType::BF16}) {
    for (Case c : {Case{64, 64, 8, 8}, Case{80, 20, 8, 2}, Case{128, 32, 6, 1}, Case{128, 0, 4, 4}}) {
      const int max_seq = 300, slots = 5, scratch = 4;
      const std::vector<int32_t> tok_slot = {2, 0, 3, 1, scratch, scratch};
      const std::vector<int32_t> tok_pos = {0, 16, 129, 299, 0, 0};
      const int n = static_cast<int>(tok_slot.size());
      const int64_t stride = static_cast<int64_t>(c.heads + 2 * c.kv) * c.hd;
      Vec qkv = random_vec(n * stride, -2, 2, t, rng);
      for (int64_t j = 0; j < stride; ++j) qkv[5 * stride + j] = qkv[4 * stride + j];
      const size_t cache_elems = static_cast<size_t>(slots) * c.kv * max_seq * c.hd;
      const Vec k0 = random_vec(cache_elems, -2, 2, t, rng), v0 = random_vec(cache_elems, -2, 2, t, rng);
      ModelConfig mc;
      mc.rotary_ndims = c.rot;
      mc.head_dim = 256;  // rope_inv_freq checks rotary_ndims <= head_dim
      mc.rope_theta = 10000.0;
      const std::vector<float> inv = c.rot > 0 ? rope_inv_freq(mc) : std::vector<float>{0.f};
      Buf d_inv = upload(Vec(inv.begin(), inv.end()), DType::F32);
      Buf d_slot = upload_i32(tok_slot), d_pos = upload_i32(tok_pos);
      const double scale = 1.0 / std::sqrt(static_cast<double>(c.hd));
      const std::string what = std::string(name_of(t)) + " hd " + std::to_string(c.hd) + " rot " + std::to_string(c.rot) +
                               " heads " + std::to_string(c.heads) + "/" + std::to_string(c.kv);
      for (int splits : {1, 4, 16}) {
        cuda::AttentionParams ap;
        ap.q_stride = stride;
        ap.slots = d_slot->as<int32_t>();
        ap.positions = d_pos->as<int32_t>();
        ap.dtype = t;
        ap.n = n;
        ap.num_heads = c.heads;
        ap.num_kv_heads = c.kv;
        ap.head_dim = c.hd;
        ap.max_seq_len = max_seq;
        ap.num_splits = splits;
        ap.scale = static_cast<float>(scale);
        DeviceBuffer partial(static_cast<size_t>(n) * c.heads * splits * (c.hd + 2) * 4);
        ap.partial = partial.as<float>();
        // unfused: rotary in place, append, attention
        Buf q1 = upload(qkv, t), kc1 = upload(k0, t), vc1 = upload(v0, t);
        DeviceBuffer out1(static_cast<size_t>(n) * c.heads * c.hd * 4);
        if (c.rot > 0) {
          cuda::RotaryParams rp;
          rp.qkv = q1->ptr;
          rp.row_stride = stride;
          rp.positions = ap.positions;
          rp.inv_freq = d_inv->as<float>();
          rp.dtype = t;
          rp.n = n;
          rp.num_heads = c.heads;
          rp.num_kv_heads = c.kv;
          rp.head_dim = c.hd;
          rp.rotary_ndims = c.rot;
          cuda::apply_rotary(rp, nullptr);
        }
        cuda::KvAppendParams kp;
        kp.qkv = q1->ptr;
        kp.row_stride = stride;
        kp.k_cache = kc1->ptr;
        kp.v_cache = vc1->ptr;
        kp.slots = ap.slots;
        kp.positions = ap.positions;
        kp.dtype = t;
        kp.n = n;
        kp.num_heads = c.heads;
        kp.num_kv_heads = c.kv;
        kp.head_dim = c.hd;
        kp.max_seq_len = max_seq;
        cuda::kv_cache_append(kp, nullptr);
        cuda::AttentionParams a1 = ap;
        a1.q = q1->ptr;
        a1.k_cache = kc1->ptr;
        a1.v_cache = vc1->ptr;
        a1.out = out1.ptr;
        cuda::attention(a1, nullptr);
        // fused
        Buf q2 = upload(qkv, t), kc2 = upload(k0, t), vc2 = upload(v0, t);
        DeviceBuffer out2(static_cast<size_t>(n) * c.heads * c.hd * 4);
        cuda::AttentionParams a2 = ap;
        a2.q = q2->ptr;
        a2.k_cache = kc2->ptr;
        a2.v_cache = vc2->ptr;
        a2.out = out2.ptr;
        a2.rotary_append = true;
        a2.inv_freq = d_inv->as<float>();
        a2.rotary_ndims = c.rot;
        cuda::attention(a2, nullptr);
        const std::string w = what + " splits " + std::to_string(splits);
        const Vec ref_k = download(kc1->ptr, cache_elems, t), ref_v = download(vc1->ptr, cache_elems, t);
        // the appended keys changed the cache (so the comparison below is not vacuous)
        CHECK(ref_k != k0);
        check_close("fused append k " + w, download(kc2->ptr, cache_elems, t), ref_k, tol_for(t));
        check_close("fused append v " + w, download(vc2->ptr, cache_elems, t), ref_v, {0, 0, 0});
        const size_t out_elems = static_cast<size_t>(n) * c.heads * c.hd;
        check_close("fused attention " + w, download(out2.ptr, out_elems, t), download(out1.ptr, out_elems, t), tol_for(t));
        // the QKV rows are left unrotated by the fused kernel
        check_close("fused leaves qkv " + w, download(q2->ptr, qkv.size(), t), qkv, {0, 0, 0});
        // the same with the split merge done by the last block of each (token, head): identical output,
        // counters back to zero (twice in a row, as in consecutive layers)
        if (splits > 1) {
          DeviceBuffer counters(static_cast<size_t>(n) * c.heads * sizeof(int32_t));
          for (int rep = 0; rep < 2; ++rep) {
            Buf q3 = upload(qkv, t), kc3 = upload(k0, t), vc3 = upload(v0, t);
            DeviceBuffer out3(static_cast<size_t>(n) * c.heads * c.hd * 4);
            cuda::AttentionParams a3 = a2;
            a3.q = q3->ptr;
            a3.k_cache = kc3->ptr;
            a3.v_cache = vc3->ptr;
            a3.out = out3.ptr;
            a3.split_counters = counters.as<int32_t>();
            cuda::attention(a3, nullptr);
            check_close("fused attention, in-kernel merge " + w, download(out3.ptr, out_elems, t),
                        download(out2.ptr, out_elems, t), {0, 0, 0});
            const Vec cnt = download(counters.ptr, static_cast<size_t>(n) * c.heads, DType::F32);
            CHECK(std::all_of(cnt.begin(), cnt.end(), [](double x) { return x == 0.0; }));
          }
        }
      }
    }
  }
}

TEST_CASE("attention over a shared prefix in another slot equals attention over one slot holding it all") {
  // Slot 0 holds the whole sequence; slot 2 only its first P positions (the shared prefix) and slot 1
  // only the positions from P on; the rest of slots 1 and 2 is noise that must never be read.
  std::mt19937 rng(11);
  const int max_seq = 96, P = 40, hd = 64, heads = 4, kv = 2;
  for (DType t : {DType::F32, DType::F16, DType::BF16}) {
    const size_t per_slot = static_cast<size_t>(kv) * max_seq * hd;
    const Vec seq_k = random_vec(per_slot, -1, 1, t, rng), seq_v = random_vec(per_slot, -1, 1, t, rng);
    Vec k_cache = random_vec(3 * per_slot, -9, 9, t, rng), v_cache = random_vec(3 * per_slot, -9, 9, t, rng);
    for (int j = 0; j < kv; ++j)
      for (int pos = 0; pos < max_seq; ++pos)
        for (int d = 0; d < hd; ++d) {
          const size_t at = (static_cast<size_t>(j) * max_seq + pos) * hd + d;
          k_cache[at] = seq_k[at];
          v_cache[at] = seq_v[at];
          const size_t other = (pos < P ? 2 : 1) * per_slot + at;
          k_cache[other] = seq_k[at];
          v_cache[other] = seq_v[at];
        }
    Buf d_k = upload(k_cache, t), d_v = upload(v_cache, t);
    const std::vector<int32_t> positions = {P, P + 1, 55, 95, 63};
    const int n = static_cast<int>(positions.size());
    const int64_t stride = static_cast<int64_t>(heads + 2 * kv) * hd;
    Buf d_q = upload(random_vec(n * stride, -2, 2, t, rng), t), d_pos = upload_i32(positions);
    Buf whole = upload_i32(std::vector<int32_t>(n, 0)), own = upload_i32(std::vector<int32_t>(n, 1));
    Buf prefix_slot = upload_i32(std::vector<int32_t>(n, 2)), prefix_len = upload_i32(std::vector<int32_t>(n, P));
    for (const int window : {0, 7, 30})
      for (const bool decode : {false, true})
        for (const int splits : {1, 3, 16}) {
          CAPTURE(name_of(t));
          CAPTURE(window);
          CAPTURE(decode);
          CAPTURE(splits);
          DeviceBuffer partial(static_cast<size_t>(n) * heads * splits * (hd + 2) * 4);
          auto run = [&](const Buf& slots, bool shared) {
            DeviceBuffer out(static_cast<size_t>(n) * heads * hd * 4);
            cuda::AttentionParams ap;
            ap.q = d_q->ptr;
            ap.q_stride = stride;
            ap.k_cache = d_k->ptr;
            ap.v_cache = d_v->ptr;
            ap.slots = slots->as<int32_t>();
            ap.positions = d_pos->as<int32_t>();
            if (shared) {
              ap.prefix_slots = prefix_slot->as<int32_t>();
              ap.prefix_lens = prefix_len->as<int32_t>();
            }
            ap.out = out.ptr;
            ap.partial = partial.as<float>();
            ap.dtype = t;
            ap.n = n;
            ap.num_heads = heads;
            ap.num_kv_heads = kv;
            ap.head_dim = hd;
            ap.max_seq_len = max_seq;
            ap.num_splits = splits;
            ap.scale = 0.125f;
            ap.window = window;
            ap.decode = decode;
            cuda::attention(ap, nullptr);
            return download(out.ptr, static_cast<size_t>(n) * heads * hd, t);
          };
          CHECK(run(own, true) == run(whole, false));  // the same keys in the same order: the same bits
          CHECK(run(own, false) != run(whole, false));  // the noise would be read without the prefix
        }
  }
}

TEST_CASE("attention over a kv_cache ring (position p at row p mod kv_positions) equals the full cache") {
  // Each token has its own slot; its ring holds the last kv_positions positions of the full cache's
  // slot (model/kv_ring.h: 2 x window rows), its other rows noise that must never be read.
  std::mt19937 rng(12);
  const int max_seq = 96, hd = 64, heads = 4, kv = 2;
  const std::vector<int32_t> positions = {3, 13, 14, 55, 95};
  const int n = static_cast<int>(positions.size());
  for (DType t : {DType::F32, DType::F16, DType::BF16})
    for (const int window : {7, 30}) {
      const int rows = 2 * window;
      const size_t full_slot = static_cast<size_t>(kv) * max_seq * hd, ring_slot = static_cast<size_t>(kv) * rows * hd;
      const Vec full_k = random_vec(n * full_slot, -1, 1, t, rng), full_v = random_vec(n * full_slot, -1, 1, t, rng);
      Vec ring_k = random_vec(n * ring_slot, -9, 9, t, rng), ring_v = random_vec(n * ring_slot, -9, 9, t, rng);
      for (int s = 0; s < n; ++s)
        for (int j = 0; j < kv; ++j)
          for (int pos = std::max(0, positions[s] - rows + 1); pos <= positions[s]; ++pos)
            for (int d = 0; d < hd; ++d) {
              const size_t from = s * full_slot + (static_cast<size_t>(j) * max_seq + pos) * hd + d;
              const size_t to = s * ring_slot + (static_cast<size_t>(j) * rows + pos % rows) * hd + d;
              ring_k[to] = full_k[from];
              ring_v[to] = full_v[from];
            }
      Buf d_fk = upload(full_k, t), d_fv = upload(full_v, t), d_rk = upload(ring_k, t), d_rv = upload(ring_v, t);
      Buf d_nk = upload(random_vec(n * ring_slot, -9, 9, t, rng), t), d_nv = upload(random_vec(n * ring_slot, -9, 9, t, rng), t);
      const int64_t stride = static_cast<int64_t>(heads + 2 * kv) * hd;
      Buf d_q = upload(random_vec(n * stride, -2, 2, t, rng), t), d_pos = upload_i32(positions);
      Buf d_slots = upload_i32({0, 1, 2, 3, 4});
      for (const bool decode : {false, true})
        for (const int splits : {1, 3}) {
          CAPTURE(name_of(t));
          CAPTURE(window);
          CAPTURE(decode);
          CAPTURE(splits);
          DeviceBuffer partial(static_cast<size_t>(n) * heads * splits * (hd + 2) * 4);
          auto run = [&](const Buf& k, const Buf& v, int kv_positions) {
            DeviceBuffer out(static_cast<size_t>(n) * heads * hd * 4);
            cuda::AttentionParams ap;
            ap.q = d_q->ptr;
            ap.q_stride = stride;
            ap.k_cache = k->ptr;
            ap.v_cache = v->ptr;
            ap.slots = d_slots->as<int32_t>();
            ap.positions = d_pos->as<int32_t>();
            ap.out = out.ptr;
            ap.partial = partial.as<float>();
            ap.dtype = t;
            ap.n = n;
            ap.num_heads = heads;
            ap.num_kv_heads = kv;
            ap.head_dim = hd;
            ap.max_seq_len = max_seq;
            ap.kv_positions = kv_positions;
            ap.num_splits = splits;
            ap.scale = 0.125f;
            ap.window = window;
            ap.decode = decode;
            cuda::attention(ap, nullptr);
            return download(out.ptr, static_cast<size_t>(n) * heads * hd, t);
          };
          const Vec want = run(d_fk, d_fv, 0);
          CHECK(run(d_rk, d_rv, rows) == want);  // the same keys in the same order: the same bits
          CHECK(run(d_nk, d_nv, rows) != want);  // a ring of noise gives other values
        }
    }
}
