// config_files.cpp: reading tokenizer_config.json, special_tokens_map.json, generation_config.json
// and config.json for the tokenizer's BOS/EOS facts.
#include "tokenizer/config_files.h"

#include <algorithm>
#include <climits>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "format/error.h"
#include "format/json_depth.h"
#include "format/json_error.h"
#include "tokenizer/token_id.h"

namespace tpshard {
namespace {

/// The JSON object in file p, or null when p does not exist. Throws Error naming p when it is not valid
/// JSON or not an object (every file read here is a JSON object in Hugging Face checkpoints).
nlohmann::json read_json_if_exists(const std::filesystem::path& p) {
  if (!std::filesystem::exists(p)) return nullptr;
  std::ifstream in(p);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in, json_depth_guard(p.string()));
  } catch (const nlohmann::json::exception& e) {
    throw Error(p.string() + ": not valid JSON (" + json_error_text(e) + ")", "re-download or regenerate the file");
  }
  if (!j.is_object())
    throw Error(p.string() + ": is a JSON " + j.type_name() + ", not an object",
                "re-download or regenerate the file");
  return j;
}

// "bos_token": "<s>" or {"content": "<s>", ...} (transformers' AddedToken serialization).
std::string token_content(const nlohmann::json& j, const char* key) {
  if (!j.is_object() || !j.contains(key)) return {};
  const auto& v = j.at(key);
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v.at("content").is_string()) return v.at("content").get<std::string>();
  return {};
}

void append_ids(const nlohmann::json& j, const char* key, std::vector<int32_t>& out) {
  if (!j.is_object() || !j.contains(key)) return;
  const auto& v = j.at(key);
  auto add = [&](const nlohmann::json& x) {
    if (!x.is_number_integer()) return;  // like any other value that is not an id: ignored
    if (x.is_number_unsigned() ? x.get<uint64_t>() > uint64_t(kMaxTokenId) : (x.get<int64_t>() < 0 || x.get<int64_t>() > kMaxTokenId))
      return;
    const auto id = static_cast<int32_t>(x.get<int64_t>());
    if (std::find(out.begin(), out.end(), id) == out.end()) out.push_back(id);
  };
  if (v.is_array()) for (const auto& x : v) add(x);
  else add(v);
}

}  // namespace

TokenizerSideConfig read_side_config(const std::string& dir) {
  namespace fs = std::filesystem;
  TokenizerSideConfig c;
  const auto tc = read_json_if_exists(fs::path(dir) / "tokenizer_config.json");
  const auto stm = read_json_if_exists(fs::path(dir) / "special_tokens_map.json");
  const auto gen = read_json_if_exists(fs::path(dir) / "generation_config.json");
  const auto cfg = read_json_if_exists(fs::path(dir) / "config.json");
  if (tc.is_object()) {
    if (tc.contains("add_bos_token") && tc.at("add_bos_token").is_boolean()) c.add_bos_token = tc.at("add_bos_token").get<bool>();
    if (tc.contains("add_eos_token") && tc.at("add_eos_token").is_boolean()) c.add_eos_token = tc.at("add_eos_token").get<bool>();
    if (tc.contains("model_max_length") && tc.at("model_max_length").is_number()) {
      const double m = tc.at("model_max_length").get<double>();
      if (m > 0 && m < 1e18) c.model_max_length = static_cast<int64_t>(m);
    }
  }
  if (tc.is_object() && tc.contains("added_tokens_decoder") && tc.at("added_tokens_decoder").is_object()) {
    for (const auto& item : tc.at("added_tokens_decoder").items()) {
      const std::string& key = item.key();
      const nlohmann::json& v = item.value();
      if (!v.is_object() || !v.contains("content") || !v.at("content").is_string()) continue;
      AddedToken t;
      try {
        size_t used = 0;
        const long long id = std::stoll(key, &used);
        if (used != key.size() || id < 0 || id > kMaxTokenId) continue;  // not an id: ignored, as a bad entry
        t.id = static_cast<int32_t>(id);
      } catch (const std::exception&) {
        continue;
      }
      t.content = v.at("content").get<std::string>();
      auto flag = [&](const char* k) { return v.contains(k) && v.at(k).is_boolean() && v.at(k).get<bool>(); };
      t.special = flag("special");
      t.lstrip = flag("lstrip");
      t.rstrip = flag("rstrip");
      t.normalized = flag("normalized");
      t.single_word = flag("single_word");
      if (t.id >= 0 && !t.content.empty()) c.added_tokens.push_back(t);
    }
  }
  c.bos_token = token_content(tc, "bos_token");
  if (c.bos_token.empty()) c.bos_token = token_content(stm, "bos_token");
  c.eos_token = token_content(tc, "eos_token");
  if (c.eos_token.empty()) c.eos_token = token_content(stm, "eos_token");
  append_ids(gen, "eos_token_id", c.eos_token_ids);
  append_ids(cfg, "eos_token_id", c.eos_token_ids);
  std::vector<int32_t> bos;
  append_ids(gen, "bos_token_id", bos);
  append_ids(cfg, "bos_token_id", bos);
  if (!bos.empty()) c.bos_token_id = bos.front();
  return c;
}

}  // namespace tpshard
