// mistral.cpp: MistralForCausalLM. The Llama block (llama_family.h) with a sliding_window (Mistral v0.1:
// 4096; null or absent in later versions).
#include "model/arch/llama_family.h"
#include "model/arch/registry.h"
#include "model/config_fields.h"

namespace tpshard {

namespace {

using namespace config_fields;

double parse(const nlohmann::json& j, ModelConfig& c, const std::string& path) {
  const double partial = llama_family::parse_common(j, c, path);
  llama_family::parse_llama_biases(j, c, path);
  c.sliding_window = opt_int(j, "sliding_window", 0, path);
  return partial;
}

}  // namespace

const ArchSpec kMistralArch{Arch::Mistral, "MistralForCausalLM", "llama", parse, llama_family::plan,
                            llama_family::no_ignorable};

}  // namespace tpshard
