// multimodal.h: checkpoints of a multimodal model (vision or audio tower + projector + language model)
// whose language model is an architecture of the registry. tpshard converts and runs the language model
// alone; the rest of the checkpoint is skipped and named in one line.
//
// One rule covers the common nestings:
//   config.json   the outer config's architectures[0] is not in the registry, and its `llm_config`
//                 (NVLM-D, InternVL) or `text_config` (LLaVA, Gemma 3, Mistral 3, ...) object is the
//                 language model's config: its own architectures[0] (or, without one, its model_type)
//                 names a supported architecture. Every field is read from the nested object; of the
//                 outer fields only the dtype (torch_dtype / dtype) is taken when the nested object lacks
//                 it, as transformers applies the outer dtype to every sub-model.
//   tensors       `language_model.X` -> `X` (language_model.model.layers.0.* -> model.layers.0.*,
//                 language_model.lm_head.weight -> lm_head.weight); `model.language_model.X` -> `model.X`
//                 (model.language_model.layers.0.* -> model.layers.0.*); `lm_head.*` stays (the head
//                 beside model.language_model). Every other tensor (vision_model.*, mlp1.*,
//                 model.vision_tower.*, multi_modal_projector.*, ...) is outside the language model.
// Does not own: the language model's own config defaults and tensor names (model/arch/).
#pragma once
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace tpshard::multimodal {

/// The nested language model's config of a multimodal config.json `j`, with the outer dtype added when
/// the nested object has none; nullopt when j has neither llm_config nor text_config. Throws Error naming
/// `path` and the key when the first one present is not an object, names no architecture or model_type,
/// or names one tpshard does not support. *key (when given) is set to the key it was found under.
std::optional<nlohmann::json> language_model_config(const nlohmann::json& j, const std::string& path,
                                                    std::string* key = nullptr);

/// The language model's name of a checkpoint tensor of a nested checkpoint (rules above), or "" when the
/// tensor is outside the language model.
std::string language_model_tensor(const std::string& source_name);

/// The group a tensor outside the language model is reported under: its first name component + ".*"
/// ("vision_model.*", "mlp1.*"), or the first two under "model." ("model.vision_tower.*").
std::string skipped_group(const std::string& source_name);

/// The line `tpshard convert` prints for the skipped tensors, e.g. "skipped 123 tensors of
/// mlp1.*, vision_model.* (outside the language model of NVLM_D: vision tower and projector; tpshard runs
/// the language model)". `groups` in the order given (the converter's: sorted by name).
std::string skipped_line(size_t count, const std::vector<std::string>& groups, const std::string& outer_architecture);

}  // namespace tpshard::multimodal
