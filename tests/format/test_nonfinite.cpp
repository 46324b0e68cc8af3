// test_nonfinite.cpp: a checkpoint holding NaN/inf is refused by `tpshard convert` (error naming the
// checkpoint file, the tensor and the counts; nothing left at OUT or OUT.tmp-*), and converts with
// --allow-nonfinite. Fixtures: copies of tests/fixtures/tiny-llama{,-bf16} (f32, bf16) and a random f16
// GPT-NeoX, with values poked in.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

#include "convert/convert.h"
#include "format/dtype.h"
#include "format/error.h"
#include "format/safetensors.h"
#include "tiny_checkpoint.h"

using namespace tpshard;
using namespace tpshard::test;
namespace fs = std::filesystem;

namespace {

/// Copy fixture `name` to d/hf; "neox-f16" instead writes a random f16 GPT-NeoX (no f16 fixture exists).
std::string copy_fixture(const ScratchDir& d, const std::string& name) {
  if (name == "neox-f16")
    make_neox(NeoxSpec{}).save(d / "hf");
  else
    fs::copy(std::string(TPSHARD_FIXTURES) + "/" + name, d / "hf", fs::copy_options::recursive);
  return d / "hf";
}

/// Overwrite element `index` of tensor `tensor` in hf/model.safetensors with `v` (in the tensor's dtype).
void poke(const std::string& hf, const std::string& tensor, uint64_t index, float v) {
  const std::string path = hf + "/model.safetensors";
  uint64_t off = 0;
  DType dt = DType::F32;
  {
    SafetensorsFile f(path);
    const auto it = f.tensors().find(tensor);
    REQUIRE(it != f.tensors().end());
    dt = it->second.dtype;
    REQUIRE(index < it->second.bytes / dtype_size(dt));
    off = it->second.file_offset + index * dtype_size(dt);
  }
  uint8_t bytes[4];
  if (dt == DType::F32) {
    std::memcpy(bytes, &v, 4);
  } else {
    const uint16_t h = dt == DType::F16 ? f32_to_f16(v) : f32_to_bf16(v);
    std::memcpy(bytes, &h, 2);
  }
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(static_cast<std::streamoff>(off));
  f.write(reinterpret_cast<const char*>(bytes), static_cast<std::streamsize>(dtype_size(dt)));
  REQUIRE(f.good());
}

ConvertOptions options(const ScratchDir& d, const std::string& hf) {
  ConvertOptions o;
  o.hf_dir = hf;
  o.out_dir = d / "out";
  o.tp_sizes = {1, 2};
  o.progress = false;
  return o;
}

/// Nothing named out* (OUT, OUT.tmp-*, OUT.old-*) next to OUT.
void check_nothing_left(const ScratchDir& d) {
  for (const auto& e : fs::directory_iterator(d.path)) {
    const std::string left = "left behind: " + e.path().filename().string();
    CHECK_MESSAGE(e.path().filename().string().rfind("out", 0) != 0, left);
  }
}

}  // namespace

TEST_CASE("count_nonfinite: NaN and inf counted by exponent bits for f32, f16 and bf16") {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const std::vector<float> v = {1.0f, nan, -inf, 0.0f, inf, -nan, 65504.0f, -0.0f, 1e-30f};
  for (DType dt : {DType::F32, DType::F16, DType::BF16}) {
    std::vector<uint8_t> b(v.size() * dtype_size(dt));
    for (size_t i = 0; i < v.size(); ++i) {
      if (dt == DType::F32) {
        std::memcpy(b.data() + 4 * i, &v[i], 4);
      } else {
        const uint16_t h = dt == DType::F16 ? f32_to_f16(v[i]) : f32_to_bf16(v[i]);
        std::memcpy(b.data() + 2 * i, &h, 2);
      }
    }
    uint64_t nans = 99;
    CHECK(count_nonfinite(b.data(), dt, v.size(), &nans) == 4);
    CHECK(nans == 2);
    CHECK(count_nonfinite(b.data(), dt, 1, &nans) == 0);
    CHECK(nans == 0);
  }
}

TEST_CASE("convert refuses a NaN/inf weight (f32, bf16 and f16 sources), converts with allow_nonfinite") {
  struct Case {
    const char* fixture;
    const char* tensor;
  };
  for (const Case c : {Case{"tiny-llama", "model.layers.1.mlp.down_proj.weight"},
                       Case{"tiny-llama-bf16", "model.layers.0.self_attn.k_proj.weight"},
                       Case{"neox-f16", "gpt_neox.layers.0.attention.query_key_value.weight"}}) {
    CAPTURE(c.fixture);
    ScratchDir d;
    const std::string hf = copy_fixture(d, c.fixture);
    poke(hf, c.tensor, 7, std::numeric_limits<float>::quiet_NaN());
    poke(hf, c.tensor, 9, std::numeric_limits<float>::quiet_NaN());
    poke(hf, c.tensor, 11, -std::numeric_limits<float>::infinity());
    ConvertOptions o = options(d, hf);
    std::string what, hint;
    try {
      convert_checkpoint(o);
    } catch (const Error& e) {
      what = e.what();
      hint = e.hint();
    }
    REQUIRE_MESSAGE(!what.empty(), "convert accepted a checkpoint with NaN/inf");
    CHECK_MESSAGE(what.find("checkpoint " + hf + "/model.safetensors") != std::string::npos, what);
    CHECK_MESSAGE(what.find(std::string("tensor '") + c.tensor + "' has 2 NaN and 1 inf values") != std::string::npos, what);
    CHECK(hint == "the checkpoint is corrupt: re-download it (or pass --allow-nonfinite to convert anyway)");
    check_nothing_left(d);

    o.allow_nonfinite = true;
    convert_checkpoint(o);
    CHECK(fs::exists(d / "out/manifest.json"));
  }
}

TEST_CASE("tpshard convert CLI: NaN weight exits 1 with the message; --allow-nonfinite converts") {
  ScratchDir d;
  const std::string hf = copy_fixture(d, "tiny-llama");
  poke(hf, "model.norm.weight", 0, std::numeric_limits<float>::quiet_NaN());
  const std::string log = d / "log.txt";
  CHECK(run_tpshard("convert " + hf + " -o " + (d / "out") + " --tp 1,2", log) == 1);
  const std::string text = read_text(log);
  CHECK_MESSAGE(text.find("tensor 'model.norm.weight' has 1 NaN and 0 inf values") != std::string::npos, text);
  CHECK_MESSAGE(text.find("--allow-nonfinite") != std::string::npos, text);
  check_nothing_left(d);
  CHECK(run_tpshard("convert " + hf + " -o " + (d / "out") + " --tp 1,2 --allow-nonfinite", log) == 0);
  CHECK(fs::exists(d / "out/manifest.json"));
}
