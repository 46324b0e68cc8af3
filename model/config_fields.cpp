// config_fields.cpp: see config_fields.h.
#include "model/config_fields.h"

#include "format/error.h"

namespace tpshard::config_fields {

using nlohmann::json;

bool has(const json& j, const char* key) { return j.contains(key) && !j[key].is_null(); }

int64_t req_int(const json& j, const char* key, const std::string& path) {
  if (!has(j, key)) throw Error(path + ": required field \"" + key + "\" is missing", "add it to config.json (see the model's original config)");
  if (!j[key].is_number_integer()) throw Error(path + ": field \"" + key + "\" must be an integer", "fix config.json");
  const int64_t v = j[key].get<int64_t>();
  if (v <= 0) throw Error(path + ": field \"" + key + "\" must be positive, got " + std::to_string(v), "fix config.json");
  return v;
}

int64_t opt_int(const json& j, const char* key, int64_t def, const std::string& path) {
  if (!has(j, key)) return def;
  if (!j[key].is_number_integer()) throw Error(path + ": field \"" + key + "\" must be an integer", "fix config.json");
  return j[key].get<int64_t>();
}

double opt_num(const json& j, const char* key, double def, const std::string& path) {
  if (!has(j, key)) return def;
  if (!j[key].is_number()) throw Error(path + ": field \"" + key + "\" must be a number", "fix config.json");
  return j[key].get<double>();
}

bool opt_bool(const json& j, const char* key, bool def, const std::string& path) {
  if (!has(j, key)) return def;
  if (!j[key].is_boolean()) throw Error(path + ": field \"" + key + "\" must be true or false", "fix config.json");
  return j[key].get<bool>();
}

Activation opt_act(const json& j, const char* key, const char* def, const std::string& path) {
  const std::string s = has(j, key) ? j[key].get<std::string>() : def;
  if (s == "gelu") return Activation::Gelu;
  if (s == "gelu_new" || s == "gelu_fast" || s == "gelu_pytorch_tanh") return Activation::GeluTanh;
  if (s == "silu" || s == "swish") return Activation::Silu;
  if (s == "relu") return Activation::Relu;
  throw Error(path + ": unsupported hidden_act \"" + s + "\"",
              "supported: gelu, gelu_new, gelu_fast, gelu_pytorch_tanh, silu, swish, relu");
}

const char* act_name(Activation a) {
  switch (a) {
    case Activation::Gelu: return "gelu";
    case Activation::GeluTanh: return "gelu_pytorch_tanh";
    case Activation::Silu: return "silu";
    case Activation::Relu: return "relu";
  }
  return "?";
}

}  // namespace tpshard::config_fields
