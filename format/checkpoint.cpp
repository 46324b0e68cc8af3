// checkpoint.cpp: Checkpoint: which files HF_DIR holds (an index and its shards, or one file), each
// opened by its format's reader, and one name index over all of them.
#include "format/checkpoint.h"

#include <sys/stat.h>

#include <algorithm>
#include <fstream>

#include <nlohmann/json.hpp>

#include "format/error.h"
#include "format/json_depth.h"
#include "format/json_error.h"
#include "format/safetensors.h"
#include "format/torch_checkpoint.h"

namespace tpshard {

namespace {

bool file_exists(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0;
}

/// Reads an index's weight_map (tensor -> file name) and the file names it lists, sorted; every file must exist.
std::map<std::string, std::string> read_index(const std::string& hf_dir, const std::string& index_path,
                                              std::vector<std::string>* file_names) {
  std::map<std::string, std::string> weight_map;
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
    if (std::find(file_names->begin(), file_names->end(), fn) == file_names->end()) file_names->push_back(fn);
  }
  std::sort(file_names->begin(), file_names->end());
  for (const auto& fn : *file_names)
    if (!file_exists(hf_dir + "/" + fn))
      throw Error(index_path + ": names " + fn + ", which is not in " + hf_dir,
                  "download the missing shard " + fn + " (all files the index lists are needed)");
  return weight_map;
}

}  // namespace

Checkpoint::Checkpoint(const std::string& hf_dir) {
  struct Form {
    const char* index;
    const char* single;
    bool torch;
  };
  const Form forms[] = {{"model.safetensors.index.json", "model.safetensors", false},
                        {"pytorch_model.bin.index.json", "pytorch_model.bin", true}};
  std::string index_path;
  std::map<std::string, std::string> weight_map;  // tensor -> file name (index only)
  std::vector<std::string> file_names;
  bool torch = false;
  for (const Form& form : forms) {
    if (file_exists(hf_dir + "/" + form.index)) {
      index_path = hf_dir + "/" + form.index;
      weight_map = read_index(hf_dir, index_path, &file_names);
    } else if (file_exists(hf_dir + "/" + form.single)) {
      file_names.push_back(form.single);
    } else {
      continue;
    }
    torch = form.torch;
    break;
  }
  if (file_names.empty() && index_path.empty())
    throw Error(hf_dir + ": no model.safetensors, model.safetensors.index.json, pytorch_model.bin or "
                         "pytorch_model.bin.index.json",
                "point tpshard convert at a Hugging Face model directory (config.json and its weights)");
  for (size_t fi = 0; fi < file_names.size(); ++fi) {
    const std::string p = hf_dir + "/" + file_names[fi];
    if (torch) files_.push_back(std::make_unique<TorchCheckpointFile>(p));
    else files_.push_back(std::make_unique<SafetensorsFile>(p));
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
