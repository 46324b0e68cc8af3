// test_attention_prefill.cpp: the tensor-core prefill attention (kernels/attention_prefill.cu) against
// tests/reference and against the tiled kernel on the same inputs: packed chunks of 1 to 300 tokens
// starting at position 0 or later (a prompt continued over several steps), shared prefixes read from
// another slot, GQA and a rank of an uneven split, a local window, Gemma 2's softcap, every head_dim the
// kernel instantiates, f16 and bf16. The query tiles come from runtime/query_tiles.h as in the runner.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "kernels/attention.cuh"
#include "kernels/attention_prefill.cuh"
#include "runtime/query_tiles.h"
#include "tests/kernels/test_util.h"
#include "tests/reference/reference.h"

using namespace tpshard;
using namespace tpshard::test;

namespace {

/// One chunk: tokens of slot `slot` at positions start .. start + len - 1, keys j < prefix_len read
/// from slot prefix_slot.
struct Chunk {
  int slot, start, len, prefix_slot = 0, prefix_len = 0;
};

struct Case {
  int hd, heads, kv, group = 0, offset = 0, window = 0;
  double softcap = 0;
};

}  // namespace

TEST_CASE("attention_prefill: packed chunks, shared prefixes, GQA, window, softcap vs reference and tiled kernel") {
  std::mt19937 rng(17);
  const std::vector<Chunk> chunks = {{1, 0, 300}, {2, 0, 1}, {3, 40, 17}, {4, 64, 65, 0, 64}, {5, 100, 130, 0, 90},
                                     {6, 0, 64},  {7, 5, 3, 0, 5}};
  const int slots = 8, max_seq = 320;
  std::vector<int32_t> tok_slot, tok_pos, tok_pslot, tok_plen;
  for (const Chunk& c : chunks)
    for (int k = 0; k < c.len; ++k) {
      tok_slot.push_back(c.slot);
      tok_pos.push_back(c.start + k);
      tok_pslot.push_back(c.prefix_slot);
      tok_plen.push_back(c.prefix_len);
    }
  const int n = static_cast<int>(tok_slot.size());
  std::vector<int32_t> tiles(static_cast<size_t>(n));
  const int num_tiles = query_tiles(tok_slot.data(), tok_pos.data(), tok_pslot.data(), tok_plen.data(), n,
                                    cuda::kPrefillTileRows, tiles.data());
  tiles.resize(static_cast<size_t>(num_tiles));
  Buf d_slot = upload_i32(tok_slot), d_pos = upload_i32(tok_pos), d_pslot = upload_i32(tok_pslot),
      d_plen = upload_i32(tok_plen), d_tiles = upload_i32(tiles);

  for (DType t : {DType::F16, DType::BF16}) {
    for (const Case& c : {Case{64, 8, 8}, Case{80, 8, 2}, Case{96, 4, 4}, Case{128, 6, 1}, Case{256, 2, 1},
                          Case{64, 5, 2, 4, 2}, Case{128, 4, 2, 0, 0, 37}, Case{256, 4, 2, 0, 0, 0, 50.0}}) {
      const int64_t stride = static_cast<int64_t>(c.heads + 2 * c.kv) * c.hd;
      const Vec qkv = random_vec(n * stride, -2, 2, t, rng);
      const size_t cache_elems = static_cast<size_t>(slots) * c.kv * max_seq * c.hd;
      const Vec kc = random_vec(cache_elems, -2, 2, t, rng), vc = random_vec(cache_elems, -2, 2, t, rng);
      Buf d_qkv = upload(qkv, t), d_k = upload(kc, t), d_v = upload(vc, t);

      // each token's keys [positions, kv, hd]: its prefix slot's below prefix_len, its own slot's above
      std::vector<Vec> seq_k(static_cast<size_t>(n)), seq_v(static_cast<size_t>(n));
      std::vector<const Vec*> pk(static_cast<size_t>(n)), pv(static_cast<size_t>(n));
      for (int i = 0; i < n; ++i) {
        seq_k[i].resize(static_cast<size_t>(tok_pos[i] + 1) * c.kv * c.hd);
        seq_v[i].resize(seq_k[i].size());
        for (int j = 0; j <= tok_pos[i]; ++j)
          for (int h = 0; h < c.kv; ++h)
            for (int d = 0; d < c.hd; ++d) {
              const int s = j < tok_plen[i] ? tok_pslot[i] : tok_slot[i];
              const size_t at = ((static_cast<size_t>(s) * c.kv + h) * max_seq + j) * c.hd + d;
              seq_k[i][(static_cast<size_t>(j) * c.kv + h) * c.hd + d] = kc[at];
              seq_v[i][(static_cast<size_t>(j) * c.kv + h) * c.hd + d] = vc[at];
            }
        pk[i] = &seq_k[i];
        pv[i] = &seq_v[i];
      }
      const double scale = 1.0 / std::sqrt(static_cast<double>(c.hd));
      const Vec ref = ref::attention(qkv, stride, pk, pv, tok_pos, c.heads, c.kv, c.hd, scale, c.group, c.offset,
                                     c.softcap, c.window);

      cuda::AttentionParams ap;
      ap.q = d_qkv->ptr;
      ap.q_stride = stride;
      ap.k_cache = d_k->ptr;
      ap.v_cache = d_v->ptr;
      ap.slots = d_slot->as<int32_t>();
      ap.positions = d_pos->as<int32_t>();
      ap.prefix_slots = d_pslot->as<int32_t>();
      ap.prefix_lens = d_plen->as<int32_t>();
      ap.dtype = t;
      ap.n = n;
      ap.num_heads = c.heads;
      ap.num_kv_heads = c.kv;
      ap.kv_group = c.group;
      ap.head_offset = c.offset;
      ap.head_dim = c.hd;
      ap.max_seq_len = max_seq;
      ap.scale = static_cast<float>(scale);
      ap.softcap = static_cast<float>(c.softcap);
      ap.window = c.window;
      const std::string what = std::string(name_of(t)) + " hd " + std::to_string(c.hd) + " heads " +
                               std::to_string(c.heads) + "/" + std::to_string(c.kv) + " group " +
                               std::to_string(c.group) + " offset " + std::to_string(c.offset) + " window " +
                               std::to_string(c.window) + " softcap " + std::to_string(c.softcap);

      DeviceBuffer out_tiled(static_cast<size_t>(n) * c.heads * c.hd * 2);
      ap.out = out_tiled.ptr;
      cuda::attention_tiled(ap, nullptr);
      const Vec tiled = download(out_tiled.ptr, ref.size(), t);

      ap.q_tiles = d_tiles->as<int32_t>();
      ap.num_q_tiles = num_tiles;
      REQUIRE(cuda::attention_prefill_supported(ap));
      DeviceBuffer out(static_cast<size_t>(n) * c.heads * c.hd * 2);
      ap.out = out.ptr;
      cuda::attention(ap, nullptr);  // dispatches to attention_prefill
      REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
      const Vec got = download(out.ptr, ref.size(), t);
      check_close("attention_prefill " + what, got, ref, tol_for(t));
      check_close("attention_prefill vs tiled " + what, got, tiled, tol_for(t));
    }
  }
}

TEST_CASE("attention_prefill_supported: f16 / bf16, the instantiated head_dims, query tiles, not decode" *
          doctest::test_suite("host")) {
  int32_t dummy = 0;
  cuda::AttentionParams p;
  p.dtype = DType::BF16;
  p.head_dim = 128;
  p.q_tiles = &dummy;
  p.num_q_tiles = 1;
  CHECK(cuda::attention_prefill_supported(p));
  p.dtype = DType::F32;
  CHECK_FALSE(cuda::attention_prefill_supported(p));
  p.dtype = DType::F16;
  p.head_dim = 72;
  CHECK_FALSE(cuda::attention_prefill_supported(p));
  p.head_dim = 96;
  p.decode = true;
  CHECK_FALSE(cuda::attention_prefill_supported(p));
  p.decode = false;
  p.q_tiles = nullptr;
  CHECK_FALSE(cuda::attention_prefill_supported(p));
}
