// test_gemm_logits.cpp: cuBLASLt linear (every dtype, odd shapes, f16 -> f32 out, beta = 1 accumulate),
// vocab-parallel argmax with padding masked and ties, merge over ranks, and gather_rows.
#include <doctest/doctest.h>

#include "kernels/gemm.cuh"
#include "kernels/logits.cuh"
#include "tests/kernels/test_util.h"
#include "tests/reference/reference.h"

using namespace tpshard;
using namespace tpshard::test;

TEST_CASE("gemm: Y = X W^T (+ Y) over dtypes and shapes not multiples of the tile") {
  std::mt19937 rng(7);
  cuda::Gemm gemm;
  for (DType t : {DType::F32, DType::F16, DType::BF16}) {
    for (int n : {1, 7, 33}) {
      for (int out : {1, 100, 257}) {
        for (int in : {64, 80, 1000}) {
          for (float beta : {0.f, 1.f}) {
            const DType out_t = (beta == 0.f && t != DType::F32 && out == 257) ? DType::F32 : t;
            const Vec x = random_vec(static_cast<size_t>(n) * in, -1, 1, t, rng);
            const Vec w = random_vec(static_cast<size_t>(out) * in, -1, 1, t, rng);
            const Vec y0 = random_vec(static_cast<size_t>(n) * out, -1, 1, out_t, rng);
            Buf d_x = upload(x, t), d_w = upload(w, t), d_y = upload(y0, out_t);
            cuda::GemmArgs a;
            a.x = d_x->ptr;
            a.w = d_w->ptr;
            a.y = d_y->ptr;
            a.n = n;
            a.out = out;
            a.in = in;
            a.in_dtype = t;
            a.out_dtype = out_t;
            a.beta = beta;
            gemm.linear(a, nullptr);
            const Vec ref = ref::linear(x, w, y0, beta, n, out, in);
            // sums of `in` products of magnitude <= 1: absolute error grows like sqrt(in) * eps
            Tolerance tol = tol_for(out_t);
            tol.atol *= 1 + in / 64.0;
            if (t == DType::F32) tol = {1e-3, 1e-4, 1e-5};  // cuBLASLt may use a split-K reduction order
            check_close(std::string("gemm ") + name_of(t) + "->" + name_of(out_t) + " n " + std::to_string(n) +
                            " out " + std::to_string(out) + " in " + std::to_string(in) + " beta " +
                            std::to_string(beta),
                        download(d_y->ptr, ref.size(), out_t), ref, tol);
          }
        }
      }
    }
  }
}

TEST_CASE("vocab_argmax: padding masked, lowest id on ties, merged over ranks") {
  // global vocab 1001 over 4 ranks: padded 1004, 251 per rank; rank 3 holds ids 753..1003, of which
  // 1001..1003 are padding and must never win even with the largest value.
  const int n = 3, tp = 4, vpr = 251, vocab = 1001;
  std::mt19937 rng(8);
  std::vector<Vec> logits(tp);
  for (int r = 0; r < tp; ++r) logits[r] = random_vec(static_cast<size_t>(n) * vpr, -5, 5, DType::F32, rng);
  logits[3][0 * vpr + 250] = 100.0;  // padding id 1003, row 0
  logits[1][0 * vpr + 7] = 50.0;     // winner of row 0: id 258
  logits[0][1 * vpr + 30] = 60.0;    // row 1 tie: ids 30 and 530 -> 30
  logits[2][1 * vpr + 28] = 60.0;
  logits[2][2 * vpr + 5] = 70.0;     // row 2 tie inside one rank: ids 507 and 509 -> 507
  logits[2][2 * vpr + 7] = 70.0;
  std::vector<cuda::ArgmaxPair> gathered(static_cast<size_t>(tp) * n);
  auto params = [&](int r, const Buf& d_l, const DeviceBuffer& out) {  // rank r's argmax of its columns
    cuda::ArgmaxParams p;
    p.logits = d_l->as<float>();
    p.out = out.as<cuda::ArgmaxPair>();
    p.n = n;
    p.vocab_per_rank = vpr;
    p.vocab_begin = static_cast<int64_t>(r) * vpr;
    p.vocab_size = vocab;
    return p;
  };
  for (int r = 0; r < tp; ++r) {
    Buf d_l = upload(logits[r], DType::F32);
    DeviceBuffer out(n * sizeof(cuda::ArgmaxPair));
    cuda::vocab_argmax(params(r, d_l, out), nullptr);
    REQUIRE(cudaMemcpy(&gathered[static_cast<size_t>(r) * n], out.ptr, n * sizeof(cuda::ArgmaxPair),
                       cudaMemcpyDeviceToHost) == cudaSuccess);
    const std::vector<int32_t> ref = ref::argmax(logits[r], n, vpr, static_cast<int64_t>(r) * vpr, vocab);
    for (int t = 0; t < n; ++t) {
      CHECK(gathered[static_cast<size_t>(r) * n + t].index == ref[t]);
      CHECK(gathered[static_cast<size_t>(r) * n + t].value == doctest::Approx(logits[r][t * vpr + (ref[t] - r * vpr)]));
    }
  }
  std::vector<int32_t> best(n);
  cuda::merge_argmax(gathered.data(), tp, n, best.data());
  CHECK(best[0] == 258);
  // the same pairs with each row split over blocks (the last block merges; counters back to 0)
  DeviceBuffer partial(static_cast<size_t>(n) * cuda::kArgmaxMaxSplits * sizeof(cuda::ArgmaxPair));
  DeviceBuffer counters(n * sizeof(int32_t));
  REQUIRE(cudaMemset(counters.ptr, 0, n * sizeof(int32_t)) == cudaSuccess);
  for (int splits : {2, 7, cuda::kArgmaxMaxSplits}) {
    for (int r = 0; r < tp; ++r) {
      Buf d_l = upload(logits[r], DType::F32);
      DeviceBuffer out(n * sizeof(cuda::ArgmaxPair));
      cuda::ArgmaxParams p = params(r, d_l, out);
      p.splits = splits;
      p.partial = partial.as<cuda::ArgmaxPair>();
      p.counters = counters.as<int32_t>();
      for (int rep = 0; rep < 2; ++rep) {  // twice: the counters must be zero again after a call
        cuda::vocab_argmax(p, nullptr);
        std::vector<cuda::ArgmaxPair> got(n);
        std::vector<int32_t> cnt(n);
        REQUIRE(cudaMemcpy(got.data(), out.ptr, n * sizeof(cuda::ArgmaxPair), cudaMemcpyDeviceToHost) == cudaSuccess);
        REQUIRE(cudaMemcpy(cnt.data(), counters.ptr, n * sizeof(int32_t), cudaMemcpyDeviceToHost) == cudaSuccess);
        for (int t = 0; t < n; ++t) {
          INFO("splits " << splits << " rank " << r << " row " << t);
          CHECK(got[t].index == gathered[static_cast<size_t>(r) * n + t].index);
          CHECK(got[t].value == gathered[static_cast<size_t>(r) * n + t].value);
          CHECK(cnt[t] == 0);
        }
      }
    }
  }
  CHECK(cuda::argmax_splits(1, 50304) == 25);
  CHECK(cuda::argmax_splits(1, 1 << 20) == cuda::kArgmaxMaxSplits);
  CHECK(cuda::argmax_splits(48, 50304) == 1);
  CHECK(cuda::argmax_splits(2, 100) == 1);
  CHECK(best[1] == 30);
  CHECK(best[2] == 507);
}

TEST_CASE("merge_argmax: largest value over ranks, lowest id on ties, ranks without valid columns ignored" *
          doctest::test_suite("host")) {
  // [tp 3, n 3]: rank 2 holds only vocab padding (index -1)
  const cuda::ArgmaxPair g[] = {{1.f, 4}, {7.f, 2}, {-1.f, 0},
                                {3.f, 12}, {7.f, 11}, {-2.f, 10},
                                {9.f, -1}, {9.f, -1}, {9.f, -1}};
  int32_t out[3] = {-7, -7, -7};
  cuda::merge_argmax(g, 3, 3, out);
  CHECK(out[0] == 12);
  CHECK(out[1] == 2);   // tie 7.0: ids 2 and 11 -> 2
  CHECK(out[2] == 0);
}

TEST_CASE("argmax_merge_advance: the host merge rule on the GPU, and the next decode step's inputs in place") {
  std::mt19937 rng(21);
  for (int tp : {1, 2, 3}) {
    for (int n : {1, 7, 50, 130}) {
      // values from a small set so ties across ranks are common; some pairs invalid (vocab padding)
      std::vector<cuda::ArgmaxPair> g(static_cast<size_t>(tp) * n);
      for (auto& c : g) {
        c.value = static_cast<float>(static_cast<int>(rng() % 4));
        c.index = rng() % 5 == 0 ? -1 : static_cast<int32_t>(rng() % 1000);
      }
      std::vector<int32_t> ref(n);
      cuda::merge_argmax(g.data(), tp, n, ref.data());
      const int scratch = 9, max_seq = 64;
      std::vector<int32_t> tokens(n), positions(n), slots(n);
      for (int t = 0; t < n; ++t) {
        tokens[t] = -5;
        slots[t] = t % 6 == 5 ? scratch : t % 9;
        positions[t] = t % 11 == 3 ? max_seq - 1 : static_cast<int32_t>(rng() % (max_seq - 1));
      }
      DeviceBuffer d_g(g.size() * sizeof(cuda::ArgmaxPair)), d_ids(n * 4);
      REQUIRE(cudaMemcpy(d_g.ptr, g.data(), g.size() * sizeof(cuda::ArgmaxPair), cudaMemcpyHostToDevice) == cudaSuccess);
      Buf d_tok = upload_i32(tokens), d_pos = upload_i32(positions), d_slot = upload_i32(slots);
      for (bool advance : {false, true}) {
        cuda::ArgmaxAdvanceParams p;
        p.pairs = d_g.as<cuda::ArgmaxPair>();
        p.tp_size = tp;
        p.n = n;
        p.ids = d_ids.as<int32_t>();
        p.tokens = advance ? d_tok->as<int32_t>() : nullptr;
        p.positions = d_pos->as<int32_t>();
        p.slots = d_slot->as<int32_t>();
        p.skip_slot = scratch;
        p.max_seq_len = max_seq;
        cuda::argmax_merge_advance(p, nullptr);
        std::vector<int32_t> ids(n), tok(n), pos(n);
        REQUIRE(cudaMemcpy(ids.data(), d_ids.ptr, n * 4, cudaMemcpyDeviceToHost) == cudaSuccess);
        REQUIRE(cudaMemcpy(tok.data(), d_tok->ptr, n * 4, cudaMemcpyDeviceToHost) == cudaSuccess);
        REQUIRE(cudaMemcpy(pos.data(), d_pos->ptr, n * 4, cudaMemcpyDeviceToHost) == cudaSuccess);
        for (int t = 0; t < n; ++t) {
          INFO("tp " << tp << " n " << n << " row " << t << " advance " << advance);
          CHECK(ids[t] == ref[t]);
          const bool moves = advance && slots[t] != scratch && positions[t] + 1 < max_seq;
          CHECK(tok[t] == (moves ? ref[t] : -5));
          CHECK(pos[t] == (moves ? positions[t] + 1 : positions[t]));
        }
      }
    }
  }
}

TEST_CASE("gather_rows: last-token rows") {
  std::mt19937 rng(9);
  for (DType t : {DType::F32, DType::F16, DType::BF16}) {
    const int rows = 10, width = 77;
    const Vec src = random_vec(static_cast<size_t>(rows) * width, -1, 1, t, rng);
    const std::vector<int32_t> pick = {9, 0, 4, 4};
    Buf d_src = upload(src, t), d_pick = upload_i32(pick);
    DeviceBuffer dst(pick.size() * width * 4);
    cuda::gather_rows(d_src->ptr, dst.ptr, d_pick->as<int32_t>(), static_cast<int>(pick.size()), width, t, nullptr);
    Vec ref;
    for (int r : pick) ref.insert(ref.end(), src.begin() + r * width, src.begin() + (r + 1) * width);
    check_close(std::string("gather_rows ") + name_of(t), download(dst.ptr, ref.size(), t), ref, {0, 0, 0});
  }
}
