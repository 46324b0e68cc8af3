// test_attention.cpp: kv_cache append and varlen causal attention (prefill-packed and split-K)
// against tests/reference, head_dim 64/80/128 and GQA ratios 1, 4, 6.
#include <doctest/doctest.h>

#include <cmath>

#include "kernels/attention.cuh"
#include "kernels/kv_cache.cuh"
#include "tests/kernels/test_util.h"
#include "tests/reference/reference.h"

using namespace tpshard;
using namespace tpshard::test;

TEST_CASE("kv_cache_append + attention: packed sequences of different lengths, GQA, split-K") {
  struct Case { int hd, heads, kv; };
  std::mt19937 rng(6);
  for (DType t : {DType::F32, DType::F16, DType::BF16}) {
    for (Case c : {Case{64, 8, 8}, Case{80, 8, 2}, Case{128, 6, 1}}) {
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
                               std::to_string(c.heads) + "/" + std::to_string(c.kv);
      check_close("kv_cache k " + what, download(k_cache.ptr, cache_elems, t), k_expect, {0, 0, 0});
      check_close("kv_cache v " + what, download(v_cache.ptr, cache_elems, t), v_expect, {0, 0, 0});

      std::vector<const Vec*> seq_k(n), seq_v(n);
      for (int i = 0; i < n; ++i) {
        seq_k[i] = &ks[tok_slot[i]];
        seq_v[i] = &vs[tok_slot[i]];
      }
      const double scale = 1.0 / std::sqrt(static_cast<double>(c.hd));
      const Vec ref = ref::attention(qkv, stride, seq_k, seq_v, tok_pos, c.heads, c.kv, c.hd, scale);
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
