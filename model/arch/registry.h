// registry.h: the architecture registry. One file per architecture in this folder defines its ArchSpec:
// the config.json defaults of its transformers config class, its Hugging Face tensor names -> canonical
// tensors (model/tensor_plan.h) with their layout transforms, and the source tensors it ignores.
// Adding an architecture: docs/ADD_MODEL.md.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/model_config.h"
#include "model/tensor_plan.h"

namespace tpshard {

/// One architecture.
struct ArchSpec {
  Arch arch;
  const char* hf_architecture;  ///< config.json architectures[0], e.g. "GPTNeoXForCausalLM"
  const char* family;           ///< manifest.json "arch": "gpt_neox" or "llama" (the runtime's block shape)
  /// Fill the architecture's fields of c from config.json j (the common fields, hidden_size, heads,
  /// head_dim, vocab, bos/eos, dtype, are already set); returns the partial rotary factor in (0, 1].
  /// Throws Error naming path and the field.
  double (*parse_config)(const nlohmann::json& j, ModelConfig& c, const std::string& path);
  /// The model's tensors in arena order (tensor_plan.h, add_tensor).
  std::vector<OutputTensor> (*plan_tensors)(const ModelConfig& c);
  /// Architecture-specific source tensors with no weights the runtime needs (e.g. attention mask buffers).
  bool (*is_ignorable_source)(const std::string& hf_name);
};

/// Whether hf_name ends with suffix (is_ignorable_source rules: the mask buffers ".attn.bias" and alike).
inline bool ends_with(const std::string& hf_name, const char* suffix) {
  const std::string x(suffix);
  return hf_name.size() >= x.size() && hf_name.compare(hf_name.size() - x.size(), x.size(), x) == 0;
}

/// The spec of an architecture (every enum value has one; no default branch).
const ArchSpec& arch_spec(Arch arch);

/// The spec whose hf_architecture is `hf_architecture`, or nullptr.
const ArchSpec* find_arch(const std::string& hf_architecture);

/// "GPTNeoXForCausalLM, LlamaForCausalLM, ..." for error messages.
std::string supported_architectures();

// One per architecture file (model/arch/<name>.cpp).
extern const ArchSpec kGptNeoXArch;
extern const ArchSpec kLlamaArch;
extern const ArchSpec kMistralArch;
extern const ArchSpec kQwen2Arch;
extern const ArchSpec kInternLM2Arch;
extern const ArchSpec kGptNeoArch;
extern const ArchSpec kPhi3Arch;
extern const ArchSpec kQwen3Arch;
extern const ArchSpec kStarcoder2Arch;
extern const ArchSpec kGptJArch;
extern const ArchSpec kFalconArch;
extern const ArchSpec kGemma2Arch;
extern const ArchSpec kOlmo2Arch;
extern const ArchSpec kMixtralArch;

}  // namespace tpshard
