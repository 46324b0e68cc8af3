// registry.cpp: Arch -> ArchSpec (see registry.h). A new Arch value without a line here does not
// compile warning-free (-Wswitch) and throws at run time.
#include "model/arch/registry.h"

#include "format/error.h"

namespace tpshard {

const ArchSpec& arch_spec(Arch arch) {
  switch (arch) {
    case Arch::GptNeoX: return kGptNeoXArch;
    case Arch::Llama: return kLlamaArch;
    case Arch::Mistral: return kMistralArch;
    case Arch::Qwen2: return kQwen2Arch;
    case Arch::InternLM2: return kInternLM2Arch;
    case Arch::GptNeo: return kGptNeoArch;
    case Arch::Phi3: return kPhi3Arch;
    case Arch::Qwen3: return kQwen3Arch;
    case Arch::Starcoder2: return kStarcoder2Arch;
    case Arch::GptJ: return kGptJArch;
    case Arch::Falcon: return kFalconArch;
    case Arch::Gemma2: return kGemma2Arch;
    case Arch::Olmo2: return kOlmo2Arch;
    case Arch::Mixtral: return kMixtralArch;
  }
  throw Error("unknown architecture value " + std::to_string(static_cast<int>(arch)), "this is a bug: add it to model/arch/registry.cpp");
}

namespace {

/// Every Arch value, in the order error messages list them.
constexpr Arch kAll[] = {Arch::GptNeoX, Arch::Llama,  Arch::Mistral, Arch::Qwen2,
                         Arch::InternLM2, Arch::GptNeo, Arch::Phi3,    Arch::Qwen3, Arch::Starcoder2, Arch::GptJ,
                         Arch::Falcon, Arch::Gemma2, Arch::Olmo2, Arch::Mixtral};

}  // namespace

const ArchSpec* find_arch(const std::string& hf_architecture) {
  for (Arch a : kAll)
    if (hf_architecture == arch_spec(a).hf_architecture) return &arch_spec(a);
  return nullptr;
}

std::string supported_architectures() {
  std::string s;
  for (Arch a : kAll) s += (s.empty() ? "" : ", ") + std::string(arch_spec(a).hf_architecture);
  return s;
}

}  // namespace tpshard
