// config_fields.h: typed reads of config.json fields with one error style (the file and the field named,
// "fix config.json"). Shared by model_config.cpp (common fields) and the architecture files (model/arch/).
#pragma once
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "model/model_config.h"

namespace tpshard::config_fields {

/// Present and not null.
bool has(const nlohmann::json& j, const char* key);
/// A positive integer; Error when missing, not an integer or not positive.
/// The largest magnitude of an integer field (INT32_MAX): a number beyond it (2e40, 2^64 - 1) is refused
/// before any arithmetic.
constexpr int64_t kMaxConfigInt = 2147483647;

int64_t req_int(const nlohmann::json& j, const char* key, const std::string& path);
/// An integer, or def when absent / null; Error when not an integer.
int64_t opt_int(const nlohmann::json& j, const char* key, int64_t def, const std::string& path);
/// A number, or def when absent / null; Error when not a number.
double opt_num(const nlohmann::json& j, const char* key, double def, const std::string& path);
/// A boolean, or def when absent / null; Error when not true / false.
bool opt_bool(const nlohmann::json& j, const char* key, bool def, const std::string& path);
/// hidden_act (or `key`) as an Activation, def when absent; Error naming the key and the supported names otherwise.
Activation opt_act(const nlohmann::json& j, const char* key, const char* def, const std::string& path);
/// The transformers spelling of an Activation ("gelu", "gelu_pytorch_tanh", "silu", "relu").
const char* act_name(Activation a);

}  // namespace tpshard::config_fields
