// config_fields.cpp: see config_fields.h.
#include "model/config_fields.h"

#include "format/error.h"

namespace tpshard::config_fields {

using nlohmann::json;

bool has(const json& j, const char* key) { return j.contains(key) && !j[key].is_null(); }

namespace {

/// j[key] as an integer in [-kMaxConfigInt, kMaxConfigInt] (a JSON integer; 1e300, 2.5 or 2^64-1 are errors).
int64_t bounded_int(const json& j, const char* key, const std::string& path) {
  const json& v = j[key];
  const bool fits = v.is_number_integer() &&
                    (v.is_number_unsigned() ? v.get<uint64_t>() <= uint64_t(kMaxConfigInt)
                                            : v.get<int64_t>() >= -kMaxConfigInt && v.get<int64_t>() <= kMaxConfigInt);
  if (!v.is_number_integer()) throw Error(path + ": field \"" + key + "\" must be an integer", "fix config.json");
  if (!fits)
    throw Error(path + ": field \"" + key + "\" is " + v.dump() + ", outside the +-" + std::to_string(kMaxConfigInt) +
                    " tpshard accepts",
                "fix config.json");
  return v.get<int64_t>();
}

}  // namespace

int64_t req_int(const json& j, const char* key, const std::string& path) {
  if (!has(j, key)) throw Error(path + ": required field \"" + key + "\" is missing", "add it to config.json (see the model's original config)");
  const int64_t v = bounded_int(j, key, path);
  if (v <= 0) throw Error(path + ": field \"" + key + "\" must be positive, got " + std::to_string(v), "fix config.json");
  return v;
}

int64_t opt_int(const json& j, const char* key, int64_t def, const std::string& path) {
  if (!has(j, key)) return def;
  return bounded_int(j, key, path);
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
  throw Error(path + ": unsupported " + key + " \"" + s + "\"",
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
