// safetensors.cpp: SafetensorsFile (mmap + validated header).
// safetensors layout: u64 little-endian header length N, N bytes of JSON {name: {dtype, shape,
// data_offsets: [begin, end]}, "__metadata__": {...}}, then the data area that offsets refer to.
#include "format/safetensors.h"

#include <algorithm>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "format/error.h"
#include "format/json_depth.h"
#include "format/json_error.h"
#include "format/shard_layout.h"

namespace tpshard {

namespace {

constexpr uint64_t kMaxHeaderBytes = 100000000;  // same limit as the safetensors reference reader
const char* kBadFile = "the safetensors file is corrupt or truncated: download it again";

/// Byte size of a safetensors dtype, or 0 when unknown.
size_t st_dtype_size(const std::string& d) {
  static const std::map<std::string, size_t> sizes = {
      {"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I64", 8}, {"I32", 4}, {"I16", 2}, {"I8", 1},
      {"U64", 8}, {"U32", 4}, {"U16", 2}, {"U8", 1},   {"BOOL", 1}, {"F8_E4M3", 1}, {"F8_E5M2", 1}};
  auto it = sizes.find(d);
  return it == sizes.end() ? 0 : it->second;
}

}  // namespace

SafetensorsFile::SafetensorsFile(const std::string& path) : map_(path) {
  const uint64_t size = map_.size();
  const uint8_t* const base = map_.data();
  if (size < 8) throw Error(path + ": file is " + std::to_string(size) + " bytes, too short for a safetensors header", kBadFile);
  const uint64_t n = layout::get_le<uint64_t>(base);
  if (n > kMaxHeaderBytes)
    throw Error(path + ": header length " + std::to_string(n) + " exceeds the safetensors limit of 100 MB", kBadFile);
  if (n > size - 8)
    throw Error(path + ": header length " + std::to_string(n) + " is beyond the end of the file (" + std::to_string(size) + " bytes)", kBadFile);
  const uint64_t data_start = 8 + n, data_size = size - data_start;
  nlohmann::json h;
  // A tensor name listed twice: nlohmann keeps the last entry silently (the reference safetensors
  // refuses the file), so the top-level keys are tracked while parsing.
  std::set<std::string> names;
  std::string repeated;
  const nlohmann::json::parser_callback_t track = [&](int depth, nlohmann::json::parse_event_t ev, nlohmann::json& parsed) {
    if (ev == nlohmann::json::parse_event_t::key && depth == 1 && repeated.empty() && parsed.is_string() &&
        !names.insert(parsed.get<std::string>()).second)
      repeated = parsed.get<std::string>();
    return true;
  };
  try {
    h = nlohmann::json::parse(base + 8, base + 8 + n, json_depth_guard(path + ": header", track));
  } catch (const nlohmann::json::exception& e) {
    throw Error(path + ": header is not valid JSON: " + json_error_text(e), kBadFile);
  }
  if (!repeated.empty()) throw Error(path + ": the header lists tensor \"" + repeated + "\" twice", kBadFile);
  if (!h.is_object()) throw Error(path + ": header is not a JSON object", kBadFile);
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (const auto& [name, v] : h.items()) {
    if (name == "__metadata__") continue;
    const std::string W = path + ": tensor " + name;
    if (!v.is_object() || !v.contains("dtype") || !v["dtype"].is_string() || !v.contains("shape") ||
        !v["shape"].is_array() || !v.contains("data_offsets") || !v["data_offsets"].is_array() || v["data_offsets"].size() != 2)
      throw Error(W + ": header entry needs dtype, shape and data_offsets [begin, end]", kBadFile);
    StTensor t;
    t.name = name;
    t.file = path;
    t.dtype_str = v["dtype"].get<std::string>();
    const size_t esize = st_dtype_size(t.dtype_str);
    if (esize == 0) throw Error(W + ": unknown dtype \"" + t.dtype_str + "\"", kBadFile);
    if (t.dtype_str == "F32" || t.dtype_str == "F16" || t.dtype_str == "BF16") {
      t.dtype_supported = true;
      t.dtype = dtype_from_string(t.dtype_str);
    }
    uint64_t numel = 1;
    for (const auto& d : v["shape"]) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0) throw Error(W + ": shape has a negative or non-integer dimension", kBadFile);
      t.shape.push_back(d.get<int64_t>());
      if (!layout::mul_ok(numel, static_cast<uint64_t>(t.shape.back()), &numel)) throw Error(W + ": element count overflows", kBadFile);
    }
    const auto& off = v["data_offsets"];
    if (!off[0].is_number_unsigned() || !off[1].is_number_unsigned())
      throw Error(W + ": data_offsets must be non-negative integers", kBadFile);
    const uint64_t b = off[0].get<uint64_t>(), e = off[1].get<uint64_t>();
    if (b > e || e > data_size)
      throw Error(W + ": data_offsets [" + std::to_string(b) + ", " + std::to_string(e) + "] are outside the data area (" +
                      std::to_string(data_size) + " bytes)", kBadFile);
    uint64_t want = 0;
    if (!layout::mul_ok(numel, esize, &want) || want != e - b)
      throw Error(W + ": " + std::to_string(e - b) + " bytes for shape with " + std::to_string(numel) + " " + t.dtype_str +
                      " elements (expected " + std::to_string(want) + ")", kBadFile);
    t.bytes = e - b;
    t.file_offset = data_start + b;
    t.data = base + data_start + b;
    if (t.bytes) ranges.emplace_back(b, e);
    tensors_.emplace(name, std::move(t));
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i)
    if (ranges[i].first < ranges[i - 1].second)
      throw Error(path + ": two tensors overlap at data offset " + std::to_string(ranges[i].first), kBadFile);
  map_.advise_sequential();
}

}  // namespace tpshard
