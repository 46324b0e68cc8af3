// test_attention_cascade.cpp: cascade decode attention (kernels/attention_cascade.cu: the prefix pass,
// merged by the decode kernel) against the decode kernel reading every row's prefix itself, on random
// data: f32 and bf16; GQA 1/4/6 and an uneven rank (kv_group 8, head_offset 6); head_dim 64/80/128/256;
// prefixes of 1, 33, 200, 600 and 700 keys (one tile, several tiles per split, more than
// kCascadeMaxSplits tiles); groups of 1 to 70 rows (more rows than one block serves), several prefixes
// and rows without one interleaved in one step, padding rows in the scratch slot; fused rotary + kv_cache
// append or not; 1 and 4 suffix splits with and without split_counters. Rows without a prefix must be
// bit-identical (the same kernel), a local window falls back to the decode kernel (bit-identical).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>

#include "kernels/attention.cuh"
#include "kernels/attention_cascade.cuh"
#include "kernels/attention_decode.cuh"
#include "model/model_config.h"
#include "runtime/rope.h"
#include "tests/kernels/test_util.h"

using namespace tpshard;
using namespace tpshard::test;

namespace {

struct CascadeShape {
  int hd, heads, kv;
  int group = 0, offset = 0;  ///< AttentionParams::kv_group / head_offset
};

/// One decode step: row i in slot slot[i] at position pos[i], reading prefix_len[i] keys from slot
/// prefix_slot[i] (0: no prefix). Rows in the scratch slot are padding (position 0, no prefix).
struct CascadeBatch {
  std::string name;
  std::vector<int32_t> slot, pos, prefix_slot, prefix_len;
  int slots = 0, max_seq = 0;
  void add(int s, int p, int ps, int pl) {
    slot.push_back(s);
    pos.push_back(p);
    prefix_slot.push_back(ps);
    prefix_len.push_back(pl);
  }
};

/// `members` rows sharing one prefix of P keys in slot 0, suffixes of 1..40 keys (own slots 1..).
CascadeBatch shared_batch(int members, int P) {
  CascadeBatch b;
  b.name = std::to_string(members) + " rows share a " + std::to_string(P) + "-key prefix";
  for (int i = 0; i < members; ++i) b.add(1 + i, P + (i * 7) % 40, 0, P);
  b.slots = members + 1;
  b.max_seq = P + 41;
  return b;
}

std::vector<CascadeBatch> cascade_batches() {
  std::vector<CascadeBatch> out;
  for (int P : {1, 33, 700}) out.push_back(shared_batch(1, P));
  out.push_back(shared_batch(48, 200));
  out.push_back(shared_batch(70, 33));
  out.push_back(shared_batch(16, 600));
  // Three prefixes (1, 45, 130 keys in slots 0, 1, 2), rows without a prefix and two padding rows
  // (scratch slot 27), interleaved so that one block sees several groups.
  CascadeBatch m;
  m.name = "3 prefixes (1, 45, 130 keys) interleaved with rows without one, 2 padding rows";
  const int lens[3] = {1, 45, 130};
  int own = 3;
  for (int i = 0; i < 22; ++i) {
    const int g = i % 4;  // 3: no prefix
    if (g == 3) {
      m.add(own++, 5 + 11 * i, 0, 0);
    } else {
      m.add(own++, lens[g] + (i * 5) % 30, g, lens[g]);
    }
  }
  m.add(27, 0, 0, 0);
  m.add(27, 0, 0, 0);
  m.slots = 28;
  m.max_seq = 256;
  out.push_back(m);
  return out;
}

struct CascadeCase {
  DType t;
  CascadeShape s;
  const CascadeBatch* b;
  int n = 0;
  int64_t stride = 0;
  size_t cache_elems = 0, out_elems = 0;
  Buf d_qkv, d_k, d_v, d_slot, d_pos, d_pslot, d_plen, d_inv;

  CascadeCase(DType t_, CascadeShape s_, const CascadeBatch& b_, std::mt19937& rng) : t(t_), s(s_), b(&b_) {
    n = static_cast<int>(b->slot.size());
    stride = static_cast<int64_t>(s.heads + 2 * s.kv) * s.hd;
    cache_elems = static_cast<size_t>(b->slots) * s.kv * b->max_seq * s.hd;
    out_elems = static_cast<size_t>(n) * s.heads * s.hd;
    Vec qkv = random_vec(n * stride, -2, 2, t, rng);
    for (int i = 1; i < n; ++i)  // padding rows are identical, as the runner pads
      if (b->slot[i] == b->slot[i - 1]) std::copy_n(qkv.begin() + (i - 1) * stride, stride, qkv.begin() + i * stride);
    d_qkv = upload(qkv, t);
    d_k = upload(random_vec(cache_elems, -2, 2, t, rng), t);
    d_v = upload(random_vec(cache_elems, -2, 2, t, rng), t);
    d_slot = upload_i32(b->slot);
    d_pos = upload_i32(b->pos);
    d_pslot = upload_i32(b->prefix_slot);
    d_plen = upload_i32(b->prefix_len);
    ModelConfig mc;
    mc.rotary_ndims = s.hd;
    mc.head_dim = s.hd;
    mc.rope_theta = 10000.0;
    const std::vector<float> inv = rope_inv_freq(mc);
    d_inv = upload(Vec(inv.begin(), inv.end()), DType::F32);
  }

  std::string what() const {
    return std::string(name_of(t)) + " hd " + std::to_string(s.hd) + " heads " + std::to_string(s.heads) + "/" +
           std::to_string(s.kv) + ", " + b->name;
  }

  /// Output of attention_decode() with the case's kv_cache (rotary_append writes the same bytes in every run).
  Vec run(bool cascade, bool rotary, int splits, int* counters, int window, float* cascade_partial) const {
    DeviceBuffer out(out_elems * dtype_size(t));
    DeviceBuffer partial(static_cast<size_t>(n) * s.heads * splits * (s.hd + 2) * sizeof(float));
    cuda::AttentionParams a;
    a.q = d_qkv->ptr;
    a.q_stride = stride;
    a.k_cache = d_k->ptr;
    a.v_cache = d_v->ptr;
    a.slots = d_slot->as<int32_t>();
    a.positions = d_pos->as<int32_t>();
    a.prefix_slots = d_pslot->as<int32_t>();
    a.prefix_lens = d_plen->as<int32_t>();
    a.out = out.ptr;
    a.partial = partial.as<float>();
    a.split_counters = counters;
    a.dtype = t;
    a.n = n;
    a.num_heads = s.heads;
    a.num_kv_heads = s.kv;
    a.kv_group = s.group;
    a.head_offset = s.offset;
    a.head_dim = s.hd;
    a.max_seq_len = b->max_seq;
    a.num_splits = splits;
    a.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(s.hd)));
    a.window = window;
    a.decode = true;
    a.rotary_append = rotary;
    a.inv_freq = d_inv->as<float>();
    a.rotary_ndims = rotary ? s.hd : 0;
    if (cascade) {
      a.cascade_partial = cascade_partial;
      a.cascade_max_splits = 16;
      CHECK(cuda::attention_cascade_supported(a) == (window == 0));
    }
    cuda::attention_decode(a, nullptr);
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    return download(out.ptr, out_elems, t);
  }
};

/// Rows of out (n rows of heads * hd) whose prefix_len is 0.
Vec rows_without_prefix(const Vec& out, const CascadeCase& c) {
  Vec r;
  const size_t row = static_cast<size_t>(c.s.heads) * c.s.hd;
  for (int i = 0; i < c.n; ++i)
    if (c.b->prefix_len[i] == 0) r.insert(r.end(), out.begin() + i * row, out.begin() + (i + 1) * row);
  return r;
}

void check_case(const CascadeCase& c) {
  DeviceBuffer counters(static_cast<size_t>(c.n) * c.s.heads * sizeof(int));
  DeviceBuffer cascade_partial(static_cast<size_t>(c.n) * c.s.heads * 16 * (c.s.hd + 2) * sizeof(float));
  for (bool rotary : {false, true})
    for (int splits : {1, 4})
      for (bool in_kernel_merge : {false, true}) {
        if (splits == 1 && in_kernel_merge) continue;
        int* cnt = in_kernel_merge ? counters.as<int>() : nullptr;
        const std::string what = c.what() + (rotary ? ", fused rotary" : ", unfused") + ", splits " +
                                 std::to_string(splits) + (in_kernel_merge ? " (in-kernel merge)" : "");
        CAPTURE(what);
        const Vec plain = c.run(false, rotary, splits, cnt, 0, nullptr);
        const Vec cascade = c.run(true, rotary, splits, cnt, 0, cascade_partial.as<float>());
        check_close(what + ": cascade vs decode kernel", cascade, plain, tol_for(c.t));
        CHECK(rows_without_prefix(cascade, c) == rows_without_prefix(plain, c));
        // the prefix pass ran: row 0's first partial holds a softmax state (l >= 1: its max key counts 1)
        const Vec l0 = download(cascade_partial.as<float>() + c.s.hd + 1, 1, DType::F32);
        CHECK(l0[0] >= 1.0);
      }
  // a local window: no cascade, the decode kernel alone (bit-identical)
  int* none = nullptr;
  CHECK(c.run(true, true, 4, none, 16, cascade_partial.as<float>()) == c.run(false, true, 4, none, 16, nullptr));
  const Vec z = download(counters.ptr, static_cast<size_t>(c.n) * c.s.heads, DType::F32);
  CHECK_MESSAGE(std::all_of(z.begin(), z.end(), [](double w) { return w == 0; }), "split_counters not back at zero");
}

}  // namespace

TEST_CASE("cascade decode attention (shared prefix read once per block of rows) equals the decode kernel") {
  const std::vector<CascadeBatch> batches = cascade_batches();
  std::mt19937 rng(17);
  for (DType t : {DType::F32, DType::BF16})
    for (CascadeShape s : {CascadeShape{128, 4, 4}, CascadeShape{64, 8, 2}, CascadeShape{80, 6, 1},
                           CascadeShape{256, 2, 1}, CascadeShape{64, 11, 3, 8, 6}})
      for (const CascadeBatch& b : batches) {
        const CascadeCase c(t, s, b, rng);
        check_case(c);
      }
}

TEST_CASE("cascade attention: prefix splits, rows per block, supported shapes" * doctest::test_suite("host")) {
  CHECK(cuda::attention_cascade_splits(1, 16) == 1);
  CHECK(cuda::attention_cascade_splits(32, 16) == 1);
  CHECK(cuda::attention_cascade_splits(33, 16) == 2);
  CHECK(cuda::attention_cascade_splits(200, 16) == 7);
  CHECK(cuda::attention_cascade_splits(700, 16) == 16);
  CHECK(cuda::attention_cascade_splits(700, 4) == 4);
  cuda::AttentionParams p;
  p.dtype = DType::BF16;
  p.k_cache = reinterpret_cast<void*>(uintptr_t{4096});
  p.v_cache = reinterpret_cast<void*>(uintptr_t{8192});
  auto rows = [&](int hd, int heads, int kv) {
    p.head_dim = hd;
    p.num_heads = heads;
    p.num_kv_heads = kv;
    return cuda::attention_cascade_seqs_per_block(p);
  };
  CHECK(rows(128, 32, 32) == 64);  // Llama-7B: 64 rows x 1 query head
  CHECK(rows(128, 32, 8) == 16);   // GQA 4: 64 queries of 128 dims
  CHECK(rows(256, 8, 8) == 32);    // 8192 / 256 query elements
  CHECK(rows(64, 64, 8) == 16);
  CHECK(rows(64, 71, 1) == 1);     // Falcon-7B MQA: 71 queries
  CHECK(rows(64, 200, 1) == 0);    // more queries per KV head than one block holds
  float partial = 0;
  int32_t arr = 0;
  rows(128, 32, 8);
  CHECK_FALSE(cuda::attention_cascade_supported(p));  // no workspace
  p.cascade_partial = &partial;
  p.cascade_max_splits = 16;
  CHECK_FALSE(cuda::attention_cascade_supported(p));  // no prefix arrays
  p.prefix_slots = &arr;
  p.prefix_lens = &arr;
  CHECK(cuda::attention_cascade_supported(p));
  p.window = 16;
  CHECK_FALSE(cuda::attention_cascade_supported(p));  // local layers: the decode kernel reads the prefix
  p.window = 0;
  p.head_dim = 66;
  CHECK_FALSE(cuda::attention_cascade_supported(p));  // not a decode-kernel shape
}
