// session_types.cpp: device_name, load_model_tokenizer and effective_max_seq_len (session_types.h).
#include "runtime/session_types.h"

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <string>

#include "format/error.h"

namespace tpshard {

const char* device_name(Device d) {
  switch (d) {
    case Device::Auto: return "auto";
    case Device::Cpu: return "cpu";
    case Device::Cuda: return "cuda";
  }
  return "?";
}

std::unique_ptr<Tokenizer> load_model_tokenizer(const std::string& model_dir, const ModelConfig& config) {
  namespace fs = std::filesystem;
  const bool json = fs::exists(fs::path(model_dir) / "tokenizer.json");
  if (!json && !fs::exists(fs::path(model_dir) / "tokenizer.model")) return nullptr;
  std::unique_ptr<Tokenizer> t = Tokenizer::load(model_dir);
  const std::string file = (fs::path(model_dir) / (json ? "tokenizer.json" : "tokenizer.model")).string();
  TPS_CHECK(t->vocab_size() > 0, file + ": the tokenizer has no tokens",
            "restore the model's own tokenizer file (tpshard convert copies it from the checkpoint)");
  TPS_CHECK(t->vocab_size() <= config.vocab_size,
            file + ": the tokenizer has " + std::to_string(t->vocab_size()) + " tokens, more than the model's vocab_size " +
                std::to_string(config.vocab_size) + ": it belongs to another model",
            "copy the tokenizer files of the checkpoint this model was converted from (tpshard convert copies them)");
  return t;
}

int effective_max_seq_len(const SessionOptions& opts, const ModelConfig& config) {
  const int64_t model_max = model_position_limit(config);
  if (opts.max_seq_len <= 0) return static_cast<int>(model_max > 0 ? std::min<int64_t>(model_max, 2048) : 2048);
  const bool longrope = config.rope_type == RopeType::LongRope;
  TPS_CHECK(model_max <= 0 || opts.max_seq_len <= model_max,
            "--max-seq-len " + std::to_string(opts.max_seq_len) + " exceeds the model's " +
                (longrope ? "original_max_position_embeddings " : "max_position_embeddings ") + std::to_string(model_max) +
                (longrope ? " (rope_scaling longrope: past it transformers switches to the long factors, which tprun "
                            "does not run)"
                          : ""),
            "pass --max-seq-len " + std::to_string(model_max) + " or less");
  return opts.max_seq_len;
}

}  // namespace tpshard
