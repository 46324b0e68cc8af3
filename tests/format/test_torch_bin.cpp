// test_torch_bin.cpp: checkpoints published as pytorch_model.bin (torch.save's zip format). The .bin
// twins of committed fixtures (scripts/make_bin_fixtures.py) convert to the same shard files as their
// safetensors originals; archives built here byte by byte (torch_archive_builder.h) check what the
// reader accepts (dtypes, tied storages, views, zip64 or not, any top folder) and each refusal's message:
// forbidden globals, truncation, recursive and deep structures, huge lengths, compressed entries, a bad
// zip directory, missing storages, out-of-bounds or strided views, the legacy format.
#include <doctest/doctest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "convert/convert.h"
#include "format/checkpoint.h"
#include "format/error.h"
#include "format/torch_checkpoint.h"
#include "format/torch_pickle.h"
#include "format/zip_archive.h"
#include "test_util.h"
#include "torch_archive_builder.h"

using namespace tpshard;
using namespace tpshard::test;
namespace fs = std::filesystem;

namespace {

const std::string kFix = TPSHARD_FIXTURES;

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}
void write_bytes(const std::string& path, const std::string& b) {
  std::ofstream f(path, std::ios::binary);
  f.write(b.data(), static_cast<std::streamsize>(b.size()));
}
template <typename T>
void poke(std::string& b, uint64_t at, T v) {
  std::memcpy(&b[at], &v, sizeof v);
}

ConvertResult convert(const std::string& hf, const std::string& out, std::vector<int> tps = {1, 2}) {
  ConvertOptions o;
  o.hf_dir = hf;
  o.out_dir = out;
  o.tp_sizes = std::move(tps);
  o.progress = false;
  o.force = true;
  return convert_checkpoint(o);
}

/// The Error that opening `bytes` as a .bin file throws (what + " | " + hint); "" when it opens.
std::string open_error(const ScratchDir& d, const std::string& bytes) {
  const std::string p = d / "pytorch_model.bin";
  write_bytes(p, bytes);
  try {
    TorchCheckpointFile f(p);
  } catch (const Error& e) {
    return std::string(e.what()) + " | " + e.hint();
  }
  return "";
}

std::string f32_bytes(const std::vector<float>& v) { return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4); }

/// A valid two-tensor archive: "w" [3, 4] f32 over storage "0" (12 elements), "b" its row 1 (a view).
std::vector<TensorSpec> two_tensors() {
  return {{"w", "FloatStorage", "0", 12, 0, {3, 4}, {4, 1}}, {"b", "FloatStorage", "0", 12, 4, {4}, {1}}};
}
std::string storage0() {
  std::vector<float> v(12);
  for (int i = 0; i < 12; ++i) v[static_cast<size_t>(i)] = static_cast<float>(i) * 0.5f;
  return f32_bytes(v);
}

}  // namespace

TEST_CASE(".bin twins convert to the same shard files as their safetensors originals, tp 1 and 2") {
  ScratchDir d;
  const std::pair<const char*, const char*> twins[] = {{"tiny-llama-bf16", "tiny-llama-bf16-bin"},
                                                       {"tiny-llama-bf16", "tiny-llama-bf16-sharded-bin"},
                                                       {"tiny-gpt-neox-par", "tiny-gpt-neox-par-bin"},
                                                       {"tiny-gpt-neo", "tiny-gpt-neo-bin"}};
  for (const auto& [orig, twin] : twins) {
    CAPTURE(twin);
    const ConvertResult a = convert(kFix + "/" + orig, d / (std::string(orig) + "-out"));
    const ConvertResult b = convert(kFix + "/" + twin, d / (std::string(twin) + "-out"));
    REQUIRE(a.shards.size() == 3);
    REQUIRE(b.shards.size() == a.shards.size());
    for (size_t k = 0; k < a.shards.size(); ++k) {
      CAPTURE(a.shards[k].file);
      CHECK(b.shards[k].file == a.shards[k].file);
      const std::string sa = read_bytes(d / (std::string(orig) + "-out/" + a.shards[k].file));
      const std::string sb = read_bytes(d / (std::string(twin) + "-out/" + b.shards[k].file));
      CHECK(sa.size() > 1000);
      CHECK(sa == sb);
    }
    const auto ma = nlohmann::json::parse(read_text(d / (std::string(orig) + "-out/manifest.json")));
    const auto mb = nlohmann::json::parse(read_text(d / (std::string(twin) + "-out/manifest.json")));
    CHECK(ma["model"] == mb["model"]);
    CHECK(ma["tokenizer_files"] == mb["tokenizer_files"]);
    CHECK(ma["dtype"] == mb["dtype"]);
    CHECK(mb["source"][0]["name"].get<std::string>().rfind("pytorch_model", 0) == 0);
  }
  // The sharded twin lists its three files; the buffers and the tied lm_head are skipped as ignorable.
  const ConvertResult s = convert(kFix + "/tiny-llama-bf16-sharded-bin", d / "s");
  CHECK(s.manifest.source.size() == 4);  // the three files, then config.json
  CHECK(s.manifest.source[0].name == "pytorch_model-00001-of-00003.bin");
  const ConvertResult neo = convert(kFix + "/tiny-gpt-neo-bin", d / "neo");
  CHECK(neo.ignored.size() == 9);  // 4 x (attn.attention.bias, masked_bias) + lm_head.weight
  CHECK(std::find(neo.ignored.begin(), neo.ignored.end(), "transformer.h.1.attn.attention.bias") != neo.ignored.end());
  CHECK(std::find(neo.ignored.begin(), neo.ignored.end(), "lm_head.weight") != neo.ignored.end());
  const ConvertResult neox = convert(kFix + "/tiny-gpt-neox-par-bin", d / "neox");
  CHECK(neox.ignored.size() == 6);  // 2 x (attention.bias, masked_bias, rotary_emb.inv_freq)
}

TEST_CASE(".bin reader: the GPT-Neo twin's buffers, tied storage and values") {
  const TorchCheckpointFile f(kFix + "/tiny-gpt-neo-bin/pytorch_model.bin");
  const auto& ts = f.tensors();
  CHECK(ts.size() == 65);
  const StTensor& mask = ts.at("transformer.h.1.attn.attention.bias");  // a local layer, window 4
  CHECK(mask.dtype_str == "BOOL");
  CHECK_FALSE(mask.dtype_supported);
  CHECK(mask.shape == std::vector<int64_t>{1, 1, 128, 128});
  CHECK(mask.bytes == 128 * 128);
  CHECK(mask.data[10 * 128 + 10] == 1);  // the diagonal
  CHECK(mask.data[10 * 128 + 7] == 1);   // 3 back: inside the window
  CHECK(mask.data[10 * 128 + 6] == 0);   // 4 back: outside
  CHECK(mask.data[10 * 128 + 11] == 0);  // the future
  CHECK(ts.at("transformer.h.0.attn.attention.bias").data[10 * 128 + 0] == 1);  // global layer
  const StTensor& mb = ts.at("transformer.h.0.attn.attention.masked_bias");
  CHECK(mb.dtype_supported);
  CHECK(mb.shape.empty());
  float v = 0;
  std::memcpy(&v, mb.data, 4);
  CHECK(v == -1e9f);
  const StTensor& wte = ts.at("transformer.wte.weight");
  const StTensor& head = ts.at("lm_head.weight");
  CHECK(head.data == wte.data);  // one storage
  CHECK(head.shape == std::vector<int64_t>{1000, 80});
  CHECK(wte.file_offset % 64 == 0);  // torch.save aligns storages to 64 bytes
  // The values are the safetensors original's.
  const std::string st = read_bytes(kFix + "/tiny-gpt-neo/model.safetensors");
  CHECK(st.find(std::string(reinterpret_cast<const char*>(wte.data), 4096)) != std::string::npos);
}

TEST_CASE(".bin reader: the fuzz seeds (shrunk twins; protocol 2 and 4 pickles) open with every tensor") {
  const std::string dir = kFix + "/fuzz/torch_bin/";
  const std::pair<const char*, size_t> seeds[] = {{"tiny-llama-bf16.bin", 20}, {"tiny-gpt-neox-par.bin", 34},
                                                  {"tiny-gpt-neo.bin", 65}, {"tiny-gpt-neo-protocol4.bin", 65}};
  for (const auto& [file, n] : seeds) {
    CAPTURE(file);
    const TorchCheckpointFile f(dir + file);
    CHECK(f.tensors().size() == n);
  }
  const TorchCheckpointFile p2(dir + "tiny-gpt-neo.bin"), p4(dir + "tiny-gpt-neo-protocol4.bin");
  for (const auto& [name, t] : p2.tensors()) {
    CAPTURE(name);
    const StTensor& u = p4.tensors().at(name);
    CHECK(u.dtype_str == t.dtype_str);
    CHECK(u.shape == t.shape);
    REQUIRE(u.bytes == t.bytes);
    CHECK(std::memcmp(u.data, t.data, t.bytes) == 0);
  }
  CHECK(p4.tensors().at("lm_head.weight").data == p4.tensors().at("transformer.wte.weight").data);
  CHECK(p4.tensors().at("transformer.wte.weight").shape == std::vector<int64_t>{2, 2});
}

TEST_CASE(".bin reader: a crafted archive: dtypes, views, tied storage, zip64 or not, any top folder") {
  ScratchDir d;
  std::vector<TensorSpec> ts = two_tensors();
  ts.push_back({"h", "HalfStorage", "1", 2, 0, {2}, {1}});
  ts.push_back({"pos", "LongStorage", "2", 3, 0, {1, 3}, {3, 1}});
  ts.push_back({"one", "FloatStorage", "0", 12, 11, {1, 1}, {7, 9}});  // size-1 dimensions: any stride
  const uint16_t h[2] = {0x3c00, 0xc000};  // 1.0, -2.0
  const int64_t pos[3] = {0, 1, 2};
  const std::map<std::string, std::string> storages = {
      {"0", storage0()}, {"1", std::string(reinterpret_cast<const char*>(h), 4)}, {"2", std::string(reinterpret_cast<const char*>(pos), 24)}};
  for (const bool zip64 : {true, false}) {
    ZipWriter z = torch_archive(state_dict_pickle(ts), storages, zip64 ? "archive" : "my_model");
    z.zip64 = zip64;
    const std::string p = d / "pytorch_model.bin";
    write_bytes(p, z.build());
    const TorchCheckpointFile f(p);
    const auto& t = f.tensors();
    REQUIRE(t.size() == 5);
    CHECK(t.at("w").dtype == DType::F32);
    CHECK(t.at("w").shape == std::vector<int64_t>{3, 4});
    CHECK(t.at("w").bytes == 48);
    CHECK(t.at("b").data == t.at("w").data + 16);
    float b0 = 0;
    std::memcpy(&b0, t.at("b").data, 4);
    CHECK(b0 == 2.0f);  // element 4 of the storage
    CHECK(t.at("h").dtype == DType::F16);
    CHECK(t.at("h").dtype_str == "F16");
    CHECK(t.at("pos").dtype_str == "I64");
    CHECK_FALSE(t.at("pos").dtype_supported);
    CHECK(t.at("pos").bytes == 24);
    CHECK(t.at("one").data == t.at("w").data + 44);
  }
}

TEST_CASE(".bin reader: a Parameter (_rebuild_parameter), STACK_GLOBAL, MEMOIZE, FRAME and protocol 4 strings") {
  ScratchDir d;
  PickleWriter p;
  p.proto(4).op(0x95).u64(0);  // FRAME (empty length: the reader does not rely on frames)
  p.op('}').op(0x94);           // EMPTY_DICT, MEMOIZE -> memo 0
  p.op(0x8c).op(1).raw("w");    // SHORT_BINUNICODE
  p.op(0x8c).op(12).raw("torch._utils").op(0x8c).op(18).raw("_rebuild_parameter").op(0x93);  // STACK_GLOBAL
  TensorSpec t{"", "BFloat16Storage", "k", 6, 0, {2, 3}, {3, 1}};
  PickleWriter inner;
  rebuild_tensor(inner, t);
  p.raw(inner.b).op(0x88).op('}').op(0x87).reduce();  // (tensor, True, {}) -> _rebuild_parameter
  p.op('s').stop();  // SETITEM
  const uint16_t v[6] = {0x3f80, 0x4000, 0x4040, 0x4080, 0x40a0, 0x40c0};
  ZipWriter z = torch_archive(p.b, {{"k", std::string(reinterpret_cast<const char*>(v), 12)}});
  write_bytes(d / "pytorch_model.bin", z.build());
  const TorchCheckpointFile f(d / "pytorch_model.bin");
  REQUIRE(f.tensors().size() == 1);
  const StTensor& w = f.tensors().at("w");
  CHECK(w.dtype == DType::BF16);
  CHECK(w.shape == std::vector<int64_t>{2, 3});
  uint16_t last = 0;
  std::memcpy(&last, w.data + 10, 2);
  CHECK(bf16_to_f32(last) == 6.0f);
}

TEST_CASE(".bin reader: forbidden globals are refused by name, nothing is called") {
  ScratchDir d;
  // GLOBAL os.system + REDUCE: the classic payload.
  PickleWriter p;
  p.proto().global("os", "system").mark().str("touch /tmp/tpshard_pwned").tuple().reduce().stop();
  std::string e = open_error(d, torch_archive(p.b, {}).build());
  CHECK(has(e, "pytorch_model.bin: archive/data.pkl: refuses the global os.system (at byte 2)"));
  CHECK(has(e, "tpshard imports and runs nothing from a checkpoint"));
  CHECK(has(e, "safe_serialization=True"));
  CHECK_FALSE(fs::exists("/tmp/tpshard_pwned"));
  // builtins.eval through STACK_GLOBAL (protocol 4).
  p = PickleWriter();
  p.proto(4).str("builtins").str("eval").op(0x93).str("1+1").op(0x85).reduce().stop();
  e = open_error(d, torch_archive(p.b, {}).build());
  CHECK(has(e, "refuses the global builtins.eval"));
  // An unknown callable inside an otherwise valid state dict: a tensor subclass rebuilder.
  std::string ok = state_dict_pickle(two_tensors());
  const std::string good_fn = "c" "torch._utils\n_rebuild_tensor_v2\n";
  std::string bad = ok;
  bad.replace(bad.find(good_fn), good_fn.size(), "ctorch._utils\n_rebuild_qtensor\n");
  e = open_error(d, torch_archive(bad, {{"0", storage0()}}).build());
  CHECK(has(e, "refuses the global torch._utils._rebuild_qtensor"));
  // A name with control bytes is printed escaped.
  p = PickleWriter();
  p.proto().global("nt", std::string("sys\x01tem", 7)).stop();
  CHECK(has(open_error(d, torch_archive(p.b, {}).build()), "refuses the global nt.sys\\x01tem"));
  // An allowed class called as a function.
  p = PickleWriter();
  p.proto().global("torch", "FloatStorage").op(')').reduce().stop();
  CHECK(has(open_error(d, torch_archive(p.b, {}).build()), "REDUCE calls torch.FloatStorage, which torch.save never calls"));
  // Opcodes outside the set (INST runs a class by name).
  p = PickleWriter();
  p.proto().raw("ios\nsystem\n").stop();
  CHECK(has(open_error(d, torch_archive(p.b, {}).build()), "opcode 0x69 is not one that torch.save emits"));
  // Through tpshard convert: the error comes alone and nothing is written.
  const std::string hf = d / "hf";
  fs::create_directories(hf);
  fs::copy_file(kFix + "/tiny-llama-bf16/config.json", hf + "/config.json");
  p = PickleWriter();
  p.proto().global("os", "system").mark().str("true").tuple().reduce().stop();
  write_bytes(hf + "/pytorch_model.bin", torch_archive(p.b, {}).build());
  ConvertOptions o;
  o.hf_dir = hf;
  o.out_dir = d / "out";
  o.tp_sizes = {1};
  o.progress = false;
  std::string what;
  try {
    convert_checkpoint(o);
  } catch (const Error& err) {
    what = err.what();
  }
  CHECK(has(what, "hf/pytorch_model.bin: archive/data.pkl: refuses the global os.system"));
  CHECK_FALSE(fs::exists(d / "out"));
}

TEST_CASE(".bin reader: truncated, recursive, deep and oversized pickles are errors") {
  ScratchDir d;
  const std::string ok = state_dict_pickle(two_tensors());
  // Truncated at every length: always an Error, never a crash (and the whole pickle opens).
  for (size_t n = 0; n < ok.size(); ++n) {
    CAPTURE(n);
    const std::string e = open_error(d, torch_archive(ok.substr(0, n), {{"0", storage0()}}).build());
    CHECK(has(e, "archive/data.pkl: "));
  }
  CHECK(open_error(d, torch_archive(ok, {{"0", storage0()}}).build()).empty());
  CHECK(has(open_error(d, torch_archive(ok.substr(0, ok.size() - 1), {{"0", storage0()}}).build()),
            "the pickle ends without STOP (truncated)"));
  CHECK(has(open_error(d, torch_archive(ok.substr(0, ok.find("storage") + 3), {{"0", storage0()}}).build()),
            "needs 7 bytes, 3 are left (truncated or a bad length)"));
  CHECK(has(open_error(d, torch_archive(ok.substr(0, ok.find("OrderedDict") + 3), {{"0", storage0()}}).build()),
            "GLOBAL without a newline-terminated name (truncated)"));
  // A list that contains itself: EMPTY_LIST, BINPUT 0, BINGET 0, APPEND.
  PickleWriter p;
  p.proto().op(']').op('q').op(0).op('h').op(0).op('a').stop();
  CHECK(has(open_error(d, torch_archive(p.b, {}).build()), "a list contains itself (a recursive structure)"));
  // Two lists that contain each other: the second change comes after the first list was placed.
  p = PickleWriter();
  p.proto().op(']').op('q').op(0).op(']').op('q').op(1).op('a');  // A.append(B)
  p.op('h').op(1).op('h').op(0).op('a').stop();                    // B.append(A)
  CHECK(has(open_error(d, torch_archive(p.b, {}).build()), "a list is changed after it was placed in another value"));
  // A dict that sets itself as its own value.
  p = PickleWriter();
  p.proto().op('}').op('q').op(0).str("x").op('h').op(0).op('s').stop();
  CHECK(has(open_error(d, torch_archive(p.b, {}).build()), "a dict contains itself"));
  // 1000 nested one-tuples: 2 bytes a level.
  p = PickleWriter();
  p.proto().op('N');
  for (int k = 0; k < 1000; ++k) p.op(0x85);
  p.stop();
  CHECK(has(open_error(d, torch_archive(p.b, {}).build()), "values nested deeper than 100 levels (limit)"));
  // 101 open MARKs.
  p = PickleWriter();
  p.proto();
  for (int k = 0; k < 101; ++k) p.mark();
  CHECK(has(open_error(d, torch_archive(p.b, {}).build()), "more than 100 nested MARKs (limit)"));
  // Huge lengths: BINUNICODE8 of 2^62 bytes, BINUNICODE of 4 GiB - 1, a frame past the end.
  p = PickleWriter();
  p.proto(4).op(0x8d).u64(uint64_t{1} << 62).stop();
  CHECK(has(open_error(d, torch_archive(p.b, {}).build()), "needs 4611686018427387904 bytes, 1 are left"));
  p = PickleWriter();
  p.proto().op('X').u32(0xFFFFFFFFu).raw("abc").stop();
  CHECK(has(open_error(d, torch_archive(p.b, {}).build()), "needs 4294967295 bytes, 4 are left"));
  p = PickleWriter();
  p.proto(4).op(0x95).u64(1000).stop();
  CHECK(has(open_error(d, torch_archive(p.b, {}).build()), "a frame of 1000 bytes runs past the end of the pickle"));
  // Memo: a huge index, and a read of an unset entry.
  p = PickleWriter();
  p.proto().op('N').op('r').u32(0xFFFFFFFFu).stop();
  CHECK(has(open_error(d, torch_archive(p.b, {}).build()), "memo index 4294967295 is beyond the limit of 1000000"));
  p = PickleWriter();
  p.proto().op('h').op(7).stop();
  CHECK(has(open_error(d, torch_archive(p.b, {}).build()), "memo entry 7 is read before it is written"));
  // Stack underflow and a MARK-less TUPLE.
  p = PickleWriter();
  p.proto().op('a').stop();
  CHECK(has(open_error(d, torch_archive(p.b, {}).build()), "an opcode needs a value but the stack is empty"));
  p = PickleWriter();
  p.proto().op('N').tuple().stop();
  CHECK(has(open_error(d, torch_archive(p.b, {}).build()), "an opcode needs a MARK, none is open"));
  // Not a state dict: a list at the top, a value that is not a tensor, a repeated key.
  p = PickleWriter();
  p.proto().op(']').stop();
  CHECK(has(open_error(d, torch_archive(p.b, {}).build()), "the pickle holds a list, not a state dict {name: tensor}"));
  p = PickleWriter();
  p.proto().op('}').str("step").integer(7).op('s').stop();
  CHECK(has(open_error(d, torch_archive(p.b, {}).build()), "the value of 'step' is a int, not a tensor"));
  std::vector<TensorSpec> twice = two_tensors();
  twice[1].name = "w";
  CHECK(has(open_error(d, torch_archive(state_dict_pickle(twice), {{"0", storage0()}}).build()), "the state dict lists 'w' twice"));
  // A storage key named with two sizes.
  std::vector<TensorSpec> clash = two_tensors();
  clash[1].numel = 13;
  CHECK(has(open_error(d, torch_archive(state_dict_pickle(clash), {{"0", storage0()}}).build()),
            "storage '0' is named as F32 x 12 and as F32 x 13"));
  // A protocol the reader does not know.
  p = PickleWriter();
  p.proto(6).stop();
  CHECK(has(open_error(d, torch_archive(p.b, {}).build()), "pickle protocol 6"));
}

TEST_CASE(".bin reader: storages and views checked against the archive") {
  ScratchDir d;
  // A storage key without its entry.
  std::vector<TensorSpec> ts = two_tensors();
  ts[1].key = "7";
  std::string e = open_error(d, torch_archive(state_dict_pickle(ts), {{"0", storage0()}}).build());
  CHECK(has(e, "data.pkl names storage '7', but the archive has no entry archive/data/7"));
  // storage_offset + numel beyond the storage.
  ts = two_tensors();
  ts[1].offset = 10;
  e = open_error(d, torch_archive(state_dict_pickle(ts), {{"0", storage0()}}).build());
  CHECK(has(e, "tensor b: storage_offset 10 + 4 elements exceeds its storage '0' of 12 elements"));
  ts[1].offset = INT64_MAX;
  CHECK(has(open_error(d, torch_archive(state_dict_pickle(ts), {{"0", storage0()}}).build()), "exceeds its storage '0'"));
  // A transposed view.
  ts = two_tensors();
  ts[0].sizes = {4, 3};
  ts[0].strides = {1, 4};
  e = open_error(d, torch_archive(state_dict_pickle(ts), {{"0", storage0()}}).build());
  CHECK(has(e, "tensor w: strides [1, 4] for shape [4, 3] are not contiguous row-major"));
  CHECK(has(e, ".contiguous()"));
  // An entry shorter than the storage's numel x element size.
  e = open_error(d, torch_archive(state_dict_pickle(two_tensors()), {{"0", storage0().substr(0, 44)}}).build());
  CHECK(has(e, "entry archive/data/0 holds 44 bytes; data.pkl says 12 F32 elements"));
  // Negative sizes, a size/stride count mismatch, too many dimensions, an element count that overflows.
  ts = two_tensors();
  ts[0].sizes = {-3, 4};
  CHECK(has(open_error(d, torch_archive(state_dict_pickle(ts), {{"0", storage0()}}).build()), "size hold a value that is not a non-negative int"));
  ts = two_tensors();
  ts[0].strides = {4};
  CHECK(has(open_error(d, torch_archive(state_dict_pickle(ts), {{"0", storage0()}}).build()), "a tensor with 2 sizes and 1 strides"));
  ts = two_tensors();
  ts[0].sizes.assign(33, 1);
  ts[0].strides.assign(33, 1);
  CHECK(has(open_error(d, torch_archive(state_dict_pickle(ts), {{"0", storage0()}}).build()), "a tensor of 33 dimensions (limit 32)"));
  ts = two_tensors();
  ts[0].sizes = {int64_t{1} << 40, int64_t{1} << 40};
  ts[0].strides = {int64_t{1} << 40, 1};
  CHECK(has(open_error(d, torch_archive(state_dict_pickle(ts), {{"0", storage0()}}).build()), "tensor w: element count overflows"));
  // A big-endian archive.
  ZipWriter z = torch_archive(state_dict_pickle(two_tensors()), {{"0", storage0()}});
  z.entries[1].bytes = "big\0\0\0";
  CHECK(has(open_error(d, z.build()), "archive/byteorder says the tensors are not little-endian"));
}

TEST_CASE(".bin reader: the zip directory: compressed entries, bad offsets, legacy and other formats") {
  ScratchDir d;
  const std::string pkl = state_dict_pickle(two_tensors());
  // A compressed data.pkl, and a compressed storage.
  ZipWriter z = torch_archive(pkl, {{"0", storage0()}});
  z.entries[0].method = 8;
  std::string e = open_error(d, z.build());
  CHECK(has(e, "pytorch_model.bin: entry 'archive/data.pkl' is compressed (zip method 8, deflate)"));
  CHECK(has(e, "torch.save stores every entry uncompressed"));
  z = torch_archive(pkl, {{"0", storage0()}});
  z.entries[2].method = 12;
  CHECK(has(open_error(d, z.build()), "entry 'archive/data/0' is compressed (zip method 12)"));
  // The central directory offset, beyond the file and inside it at the wrong place.
  for (const bool zip64 : {true, false}) {
    CAPTURE(zip64);
    z = torch_archive(pkl, {{"0", storage0()}});
    z.zip64 = zip64;
    std::string b = z.build();
    if (zip64) poke<uint64_t>(b, z.zip64_eocd_offset + 48, uint64_t{1} << 60);
    else poke<uint32_t>(b, z.eocd_offset + 16, 0x7FFFFFF0u);
    CHECK(has(open_error(d, b), "zip archive: the central directory (offset " + std::string(zip64 ? "1152921504606846976" : "2147483632")));
    b = z.build();
    if (zip64) poke<uint64_t>(b, z.zip64_eocd_offset + 48, z.cd_offset - 8);
    else poke<uint32_t>(b, z.eocd_offset + 16, static_cast<uint32_t>(z.cd_offset - 8));
    CHECK(has(open_error(d, b), "central directory entry 0 (offset " + std::to_string(z.cd_offset - 8) + "): no central directory header there"));
  }
  // More entries than the directory holds; a local header offset past the end; a local header naming another entry.
  z = torch_archive(pkl, {{"0", storage0()}});
  std::string b = z.build();
  poke<uint64_t>(b, z.zip64_eocd_offset + 24, 1000000000);
  poke<uint64_t>(b, z.zip64_eocd_offset + 32, 1000000000);
  CHECK(has(open_error(d, b), "the end record lists 1000000000 entries, more than"));
  b = z.build();
  poke<uint32_t>(b, z.cd_offset + 42, 0x7FFFFFF0u);  // entry 0's local header offset
  CHECK(has(open_error(d, b), "entry 'archive/data.pkl': no local file header at offset 2147483632"));
  b = z.build();
  poke<uint32_t>(b, z.cd_offset + 42, static_cast<uint32_t>(z.local_offsets[1]));
  CHECK(has(open_error(d, b), "entry 'archive/data.pkl': the local header at offset " + std::to_string(z.local_offsets[1]) + " names another entry"));
  // An entry size that runs into the central directory; 0xFFFFFFFF without a zip64 extra field.
  b = z.build();
  poke<uint32_t>(b, z.cd_offset + 20, 0x00100000u);
  poke<uint32_t>(b, z.cd_offset + 24, 0x00100000u);
  CHECK(has(open_error(d, b), "entry 'archive/data.pkl': its 1048576 bytes at offset"));
  b = z.build();
  poke<uint32_t>(b, z.cd_offset + 20, 0xFFFFFFFFu);
  CHECK(has(open_error(d, b), "a size or offset is 0xFFFFFFFF but there is no zip64 extra field"));
  // Truncated archives: no end record.
  b = z.build();
  CHECK(has(open_error(d, b.substr(0, b.size() - 30)), "no zip end of central directory record"));
  CHECK(has(open_error(d, b.substr(0, 10)), "too short for a zip archive"));
  // A name twice.
  z = torch_archive(pkl, {{"0", storage0()}});
  z.entries[3].name = z.entries[2].name;
  CHECK(has(open_error(d, z.build()), "entry 'archive/data/0' appears twice"));
  // No data.pkl (a TorchScript archive has code/ and constants.pkl), two of them.
  ZipWriter ts;
  ts.add("m/constants.pkl", "x").add("m/code/__torch__.py", "x");
  CHECK(has(open_error(d, ts.build()), "has no <folder>/data.pkl: not a torch.save checkpoint"));
  ts.add("a/data.pkl", pkl).add("b/data.pkl", pkl);
  CHECK(has(open_error(d, ts.build()), "holds 2 <folder>/data.pkl entries"));
  // The legacy (pre-1.6) format: a bare pickle stream starting with the magic number.
  e = open_error(d, std::string("\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19.", 15));
  CHECK(has(e, "pytorch_model.bin: PyTorch's legacy serialization format (before 1.6"));
  CHECK(has(e, "torch.save(torch.load(path), path)"));
  std::string tar(1024, '\0');
  tar.replace(257, 5, "ustar");
  CHECK(has(open_error(d, tar), "legacy tar serialization format"));
  CHECK(has(open_error(d, "x"), "not a zip archive"));
  CHECK(has(open_error(d, ""), "not a zip archive"));
}

TEST_CASE("Checkpoint: safetensors first, then pytorch_model.bin; a .bin index and its shards") {
  ScratchDir d;
  const std::string hf = d / "hf";
  fs::create_directories(hf);
  write_bytes(hf + "/pytorch_model.bin", torch_archive(state_dict_pickle(two_tensors()), {{"0", storage0()}}).build());
  {
    const Checkpoint ck(hf);
    CHECK(ck.names() == std::vector<std::string>{"b", "w"});
    CHECK(ck.files().size() == 1);
  }
  write_safetensors(hf + "/model.safetensors", {{"s", {"F32", {1}, std::vector<uint8_t>(4, 0)}}});
  CHECK(Checkpoint(hf).names() == std::vector<std::string>{"s"});
  fs::remove(hf + "/model.safetensors");
  // An index over two .bin shards; a name listed in the wrong shard.
  const std::vector<TensorSpec> ts = two_tensors();
  write_bytes(hf + "/pytorch_model-00001-of-00002.bin", torch_archive(state_dict_pickle({ts[0]}), {{"0", storage0()}}).build());
  write_bytes(hf + "/pytorch_model-00002-of-00002.bin", torch_archive(state_dict_pickle({ts[1]}), {{"0", storage0()}}).build());
  nlohmann::json wm = {{"w", "pytorch_model-00001-of-00002.bin"}, {"b", "pytorch_model-00002-of-00002.bin"}};
  write_text(hf + "/pytorch_model.bin.index.json", nlohmann::json{{"weight_map", wm}}.dump());
  {
    const Checkpoint ck(hf);
    CHECK(ck.files().size() == 2);
    CHECK(ck.find("b")->file == hf + "/pytorch_model-00002-of-00002.bin");
  }
  wm["b"] = "pytorch_model-00001-of-00002.bin";
  write_text(hf + "/pytorch_model.bin.index.json", nlohmann::json{{"weight_map", wm}}.dump());
  std::string what;
  try {
    Checkpoint ck(hf);
  } catch (const Error& e) {
    what = e.what();
  }
  CHECK(has(what, "pytorch_model.bin.index.json: tensor b is listed in pytorch_model-00001-of-00002.bin but that file does not hold it"));
}
