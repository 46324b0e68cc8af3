// safetensors.cpp: SafetensorsFile (mmap + validated header) and Checkpoint (single file or index).
// safetensors layout: u64 little-endian header length N, N bytes of JSON {name: {dtype, shape,
// data_offsets: [begin, end]}, "__metadata__": {...}}, then the data area that offsets refer to.
#include "format/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
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

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) throw Error(path + ": cannot open: " + std::strerror(errno), "check the checkpoint directory");
  try {
    struct stat st {};
    if (::fstat(fd_, &st) != 0) throw Error(path + ": fstat failed: " + std::strerror(errno), "");
    size_ = static_cast<uint64_t>(st.st_size);
    if (size_ < 8) throw Error(path + ": file is " + std::to_string(size_) + " bytes, too short for a safetensors header", kBadFile);
    map_ = static_cast<uint8_t*>(::mmap(nullptr, size_, PROT_READ, MAP_SHARED, fd_, 0));
    if (map_ == MAP_FAILED) {
      map_ = nullptr;
      throw Error(path + ": mmap failed: " + std::strerror(errno), "");
    }
    const uint64_t n = layout::get_le<uint64_t>(map_);
    if (n > kMaxHeaderBytes)
      throw Error(path + ": header length " + std::to_string(n) + " exceeds the safetensors limit of 100 MB", kBadFile);
    if (n > size_ - 8)
      throw Error(path + ": header length " + std::to_string(n) + " is beyond the end of the file (" + std::to_string(size_) + " bytes)", kBadFile);
    const uint64_t data_start = 8 + n, data_size = size_ - data_start;
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
      h = nlohmann::json::parse(map_ + 8, map_ + 8 + n, json_depth_guard(path + ": header", track));
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
      t.data = map_ + data_start + b;
      if (t.bytes) ranges.emplace_back(b, e);
      tensors_.emplace(name, std::move(t));
    }
    std::sort(ranges.begin(), ranges.end());
    for (size_t i = 1; i < ranges.size(); ++i)
      if (ranges[i].first < ranges[i - 1].second)
        throw Error(path + ": two tensors overlap at data offset " + std::to_string(ranges[i].first), kBadFile);
    ::madvise(map_, size_, MADV_SEQUENTIAL);
  } catch (...) {
    if (map_) ::munmap(map_, size_);
    ::close(fd_);
    throw;
  }
}

SafetensorsFile::~SafetensorsFile() {
  if (map_) ::munmap(map_, size_);
  if (fd_ >= 0) ::close(fd_);
}

void SafetensorsFile::drop_pages(const StTensor& t) const {
  if (!t.bytes) return;
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  const uint64_t begin = t.file_offset / page * page;
  const uint64_t end = t.file_offset + t.bytes;
  ::madvise(map_ + begin, end - begin, MADV_DONTNEED);
  ::posix_fadvise(fd_, static_cast<off_t>(begin), static_cast<off_t>(end - begin), POSIX_FADV_DONTNEED);
}

void SafetensorsFile::release(const StTensor& t, uint64_t offset, uint64_t n) const {
  if (!n) return;
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  const uint64_t begin = (t.file_offset + offset) / page * page;
  const uint64_t end = t.file_offset + offset + n;
  ::madvise(map_ + begin, end - begin, MADV_DONTNEED);
}

namespace {

bool file_exists(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0;
}

}  // namespace

Checkpoint::Checkpoint(const std::string& hf_dir) {
  const std::string index_path = hf_dir + "/model.safetensors.index.json";
  const std::string single = hf_dir + "/model.safetensors";
  std::map<std::string, std::string> weight_map;  // tensor -> file name (index only)
  std::vector<std::string> file_names;
  if (file_exists(index_path)) {
    std::ifstream f(index_path);
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(f, json_depth_guard(index_path));
    } catch (const nlohmann::json::exception& e) {
      throw Error(index_path + ": invalid JSON: " + json_error_text(e), "download the index file again");
    }
    if (!j.contains("weight_map") || !j["weight_map"].is_object())
      throw Error(index_path + ": no \"weight_map\" object", "download the index file again");
    for (const auto& [name, file] : j["weight_map"].items()) {
      if (!file.is_string()) throw Error(index_path + ": weight_map entry for " + name + " is not a file name", "");
      const std::string fn = file.get<std::string>();
      if (fn.find('/') != std::string::npos) throw Error(index_path + ": file name '" + fn + "' must not contain '/'", "");
      weight_map[name] = fn;
      if (std::find(file_names.begin(), file_names.end(), fn) == file_names.end()) file_names.push_back(fn);
    }
    std::sort(file_names.begin(), file_names.end());
    for (const auto& fn : file_names)
      if (!file_exists(hf_dir + "/" + fn))
        throw Error(index_path + ": names " + fn + ", which is not in " + hf_dir,
                    "download the missing shard " + fn + " (all files the index lists are needed)");
  } else if (file_exists(single)) {
    file_names.push_back("model.safetensors");
  } else {
    const bool bin = file_exists(hf_dir + "/pytorch_model.bin") || file_exists(hf_dir + "/pytorch_model.bin.index.json");
    throw Error(hf_dir + ": no model.safetensors or model.safetensors.index.json",
                bin ? "only pytorch_model.bin found: re-save it as safetensors (model.save_pretrained(dir, safe_serialization=True))"
                    : "point tpshard convert at a Hugging Face model directory");
  }
  for (size_t fi = 0; fi < file_names.size(); ++fi) {
    files_.push_back(std::make_unique<SafetensorsFile>(hf_dir + "/" + file_names[fi]));
    for (const auto& [name, t] : files_.back()->tensors()) {
      if (index_.count(name))
        throw Error(files_.back()->path() + ": tensor " + name + " also appears in " + files_[index_[name].first]->path(),
                    "the checkpoint is inconsistent; download it again");
      index_[name] = {fi, &t};
    }
  }
  for (const auto& [name, fn] : weight_map) {
    auto it = index_.find(name);
    if (it == index_.end() || files_[it->second.first]->path() != hf_dir + "/" + fn)
      throw Error(index_path + ": tensor " + name + " is listed in " + fn + " but that file does not hold it",
                  "the index and the shards disagree; download the checkpoint again");
  }
}

const StTensor* Checkpoint::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : it->second.second;
}

void Checkpoint::release(const StTensor& t, uint64_t offset, uint64_t n) const {
  auto it = index_.find(t.name);
  if (it != index_.end()) files_[it->second.first]->release(t, offset, n);
}

std::vector<std::string> Checkpoint::names() const {
  std::vector<std::string> v;
  for (const auto& [n, _] : index_) v.push_back(n);
  return v;
}

void Checkpoint::drop_pages(const StTensor& t) const {
  auto it = index_.find(t.name);
  if (it != index_.end()) files_[it->second.first]->drop_pages(t);
}

}  // namespace tpshard
