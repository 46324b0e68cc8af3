// multimodal.cpp: the nesting rule of multimodal checkpoints (see multimodal.h).
#include "model/multimodal.h"

#include "format/error.h"
#include "model/arch/registry.h"

namespace tpshard::multimodal {

namespace {

using nlohmann::json;

bool starts_with(const std::string& s, const std::string& prefix) { return s.compare(0, prefix.size(), prefix) == 0; }

/// model_type -> architecture for nested configs that name only their model_type (transformers writes
/// sub-configs of composite models without architectures).
const char* architecture_of_model_type(const std::string& model_type) {
  static const std::pair<const char*, const char*> kTypes[] = {
      {"llama", "LlamaForCausalLM"}, {"mistral", "MistralForCausalLM"}, {"qwen2", "Qwen2ForCausalLM"},
      {"gpt_neox", "GPTNeoXForCausalLM"}, {"internlm2", "InternLM2ForCausalLM"}};
  for (const auto& [type, arch] : kTypes)
    if (model_type == type) return arch;
  return nullptr;
}

}  // namespace

std::optional<json> language_model_config(const json& j, const std::string& path, std::string* key) {
  if (!j.is_object()) return std::nullopt;
  for (const char* k : {"llm_config", "text_config"}) {
    auto it = j.find(k);
    if (it == j.end() || it->is_null()) continue;
    const std::string where = path + ": \"" + k + "\"";
    if (!it->is_object())
      throw Error(where + " is " + it->type_name() + ", not an object",
                  "fix config.json: it holds the language model's config (restore the model's original file)");
    json lm = *it;
    auto arch = lm.find("architectures");
    if (arch != lm.end() && arch->is_array() && !arch->empty() && (*arch)[0].is_string()) {
      const std::string a = (*arch)[0].get<std::string>();
      if (!find_arch(a))
        throw Error(where + " holds a " + a + " language model, which tpshard does not support",
                    "supported architectures: " + supported_architectures());
    } else {
      auto type = lm.find("model_type");
      const bool typed = type != lm.end() && type->is_string();
      const char* a = typed ? architecture_of_model_type(type->get<std::string>()) : nullptr;
      if (!a || !find_arch(a))
        throw Error(where + (typed ? " has model_type \"" + type->get<std::string>() + "\", which tpshard does not support"
                                   : std::string(" names no architectures and no model_type")),
                    "supported architectures: " + supported_architectures() +
                        " (model_type llama, mistral, qwen2, gpt_neox, internlm2)");
      lm["architectures"] = json::array({a});
    }
    const bool has_dtype = (lm.contains("torch_dtype") && !lm["torch_dtype"].is_null()) ||
                           (lm.contains("dtype") && !lm["dtype"].is_null());
    if (!has_dtype)
      for (const char* d : {"torch_dtype", "dtype"})
        if (j.contains(d) && j[d].is_string()) lm[d] = j[d];
    if (key) *key = k;
    return lm;
  }
  return std::nullopt;
}

std::string language_model_tensor(const std::string& n) {
  if (starts_with(n, "language_model.")) return n.substr(15);
  if (starts_with(n, "model.language_model.")) return "model." + n.substr(21);
  if (starts_with(n, "lm_head.")) return n;
  return "";
}

std::string skipped_group(const std::string& n) {
  const size_t dot = n.find('.');
  if (dot == std::string::npos) return n;
  if (n.compare(0, dot, "model") == 0) {
    const size_t dot2 = n.find('.', dot + 1);
    if (dot2 != std::string::npos) return n.substr(0, dot2) + ".*";
  }
  return n.substr(0, dot) + ".*";
}

std::string skipped_line(size_t count, const std::vector<std::string>& groups, const std::string& outer) {
  std::string list;
  for (size_t i = 0; i < groups.size() && i < 8; ++i) list += (i ? ", " : "") + groups[i];
  if (groups.size() > 8) list += ", ... (" + std::to_string(groups.size()) + " groups)";
  return "skipped " + std::to_string(count) + (count == 1 ? " tensor of " : " tensors of ") + list +
         " (outside the language model of " + outer +
         ": vision tower and projector; tpshard runs the language model)";
}

}  // namespace tpshard::multimodal
