// test_memory_plan.cpp: the worker's refusal of a memory plan that does not fit, with the numbers and
// the settings that would fit (runtime/cuda/worker.h, check_memory_plan). Pure host arithmetic.
#include <doctest/doctest.h>

#include <string>

#include "format/error.h"
#include "model/manifest.h"
#include "model/memory_plan.h"
#include "runtime/cuda/worker.h"

using namespace tpshard;

namespace {
Manifest llama_like() {
  Manifest m;
  m.dtype = DType::BF16;
  ModelConfig& c = m.model;
  c.arch = Arch::Llama;
  c.hidden_size = 4096;
  c.intermediate_size = 11008;
  c.num_hidden_layers = 32;
  c.num_attention_heads = 32;
  c.num_key_value_heads = 32;
  c.head_dim = 128;
  c.vocab_size = 32000;
  c.max_position_embeddings = 4096;
  for (int tp : {1, 2, 4}) {
    for (int r = 0; r < tp; ++r) {
      ManifestShard s;
      s.tp_rank = r;
      s.file = "tp" + std::to_string(tp) + "/rank" + std::to_string(r) + ".tps";
      s.weight_bytes = 13476839424ull / uint64_t(tp);
      m.shards[tp].push_back(s);
    }
  }
  return m;
}
}  // namespace

TEST_CASE("[cpu] memory plan: fits -> no error; too big -> numbers and options that fit") {
  const Manifest m = llama_like();
  const uint64_t GiB = 1ull << 30;
  const MemoryPlan p = plan_memory(m, 1, 8, 2048, "/nonexistent");
  // kv_cache = 2 * 32 layers * (8 + 1 scratch) slots * 2048 * 32 kv heads * 128 * 2 bytes = 9 GiB.
  CHECK(p.kv_cache_bytes == 9 * GiB);
  CHECK_NOTHROW(cuda::check_memory_plan(m, "/nonexistent", 1, 8, 2048, 139 * GiB, 141 * GiB));
  std::string msg, hint;
  try {
    cuda::check_memory_plan(m, "/nonexistent", 1, 8, 4096, 20 * GiB, 80 * GiB);
  } catch (const Error& e) {
    msg = e.what();
    hint = e.hint();
  }
  CHECK_MESSAGE(msg.find("20480 MiB") != std::string::npos, msg);   // free memory named
  CHECK_MESSAGE(msg.find("kv_cache") != std::string::npos, msg);
  CHECK_MESSAGE(hint.find("--max-batch") != std::string::npos, hint);
  CHECK_MESSAGE(hint.find("--tp") != std::string::npos, hint);
}
