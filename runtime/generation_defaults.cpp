// generation_defaults.cpp: generation_config.json sampling defaults (see generation_defaults.h).
#include "runtime/generation_defaults.h"

#include <climits>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "format/error.h"
#include "format/json_depth.h"

namespace tpshard {

namespace {

/// The number at j[key] (nullopt when absent or null); Error naming path and key unless lo <= v <= hi
/// (lo excluded when lo_open).
std::optional<double> number_field(const nlohmann::json& j, const char* key, double lo, bool lo_open, double hi,
                                   const std::string& path) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::nullopt;
  auto fmt = [](double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", v);
    return std::string(buf);
  };
  const std::string range = std::string(lo_open ? "(" : "[") + fmt(lo) + ", " + (std::isinf(hi) ? "inf)" : fmt(hi) + "]");
  if (!it->is_number() || it->is_boolean())
    throw Error(path + ": \"" + key + "\" must be a number, not " + it->dump(), "fix the file, or pass --generation-config none");
  const double v = it->get<double>();
  if (!std::isfinite(v) || v < lo || (lo_open && v == lo) || v > hi)
    throw Error(path + ": \"" + key + "\" is " + it->dump() + ", outside " + range,
                "fix the file, or pass --generation-config none to ignore it");
  return v;
}

}  // namespace

GenerationDefaults read_generation_defaults(const std::string& model_dir) {
  GenerationDefaults d;
  const std::string path = model_dir + "/generation_config.json";
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return d;
  std::ifstream f(path);
  TPS_CHECK(f.good(), path + ": cannot open", "check its permissions, or pass --generation-config none");
  std::stringstream ss;
  ss << f.rdbuf();
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(ss.str(), json_depth_guard(path));
  } catch (const nlohmann::json::exception& e) {
    throw Error(path + ": not valid JSON (" + std::string(e.what()) + ")", "restore the file from the checkpoint, or pass --generation-config none");
  }
  TPS_CHECK(j.is_object(), path + ": expected a JSON object", "restore the file from the checkpoint, or pass --generation-config none");
  const double inf = INFINITY;
  if (auto v = number_field(j, "temperature", 0, false, inf, path)) d.temperature = static_cast<float>(*v);
  if (auto v = number_field(j, "top_p", 0, true, 1, path)) d.top_p = static_cast<float>(*v);
  if (auto v = number_field(j, "min_p", 0, false, 1, path)) d.min_p = static_cast<float>(*v);
  if (auto v = number_field(j, "repetition_penalty", 0, true, inf, path)) d.repetition_penalty = static_cast<float>(*v);
  if (auto v = number_field(j, "top_k", 0, false, inf, path)) {
    TPS_CHECK(*v == std::floor(*v), path + ": \"top_k\" must be an integer", "fix the file, or pass --generation-config none");
    d.top_k = *v > INT_MAX ? 0 : static_cast<int>(*v);
  }
  if (auto v = number_field(j, "max_new_tokens", 0, false, INT_MAX, path)) {
    TPS_CHECK(*v == std::floor(*v), path + ": \"max_new_tokens\" must be an integer", "fix the file, or pass --generation-config none");
    d.max_new_tokens = static_cast<int>(*v);
  }
  return d;
}

std::string apply_generation_defaults(const GenerationDefaults& d, SamplingParams& p, const std::set<std::string>& given) {
  std::string applied;
  auto take = [&](const char* name, const auto& value, auto& field) {
    if (!value || given.count(name)) return;
    field = *value;
    std::ostringstream s;
    s << name << "=" << *value;
    applied += (applied.empty() ? "" : " ") + s.str();
  };
  take("temperature", d.temperature, p.temperature);
  take("top_p", d.top_p, p.top_p);
  take("min_p", d.min_p, p.min_p);
  take("repetition_penalty", d.repetition_penalty, p.repetition_penalty);
  take("top_k", d.top_k, p.top_k);
  take("max_new_tokens", d.max_new_tokens, p.max_new_tokens);
  return applied;
}

}  // namespace tpshard
