// preflight_model.h: what tprun's preflight checks may read of the model without loading any weight:
// the manifest's config (sequence limit, BOS ids) and the tokenizer. Lets request errors (prompt too
// long for --max-seq-len, bad JSONL lines, too few eval records) fail in seconds, before the launcher
// starts workers or any shard is read.
#pragma once
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>

#include "format/manifest.h"
#include "runtime/generate.h"
#include "runtime/session.h"
#include "tokenizer/tokenizer.h"

namespace tpshard::tprun {

struct PreflightModel {
  ModelConfig config;                    ///< the manifest's model config
  std::unique_ptr<Tokenizer> tokenizer;  ///< nullptr: the model dir has no tokenizer (the run reports that)
  int64_t max_seq_len = 0;               ///< positions per kv_cache slot, as the backends compute it
  int64_t model_seq_limit = 0;           ///< the model's own context (model_seq_limit in runtime/generate.h)
};

/// Reads s.model_dir's manifest and tokenizer. Throws the Errors the backends throw for the same
/// problems (no manifest, --max-seq-len above the model's limit), with the same text.
inline PreflightModel load_preflight_model(const SessionOptions& s) {
  const Manifest manifest = load_manifest(s.model_dir);
  PreflightModel p;
  p.config = manifest.model;
  p.max_seq_len = effective_max_seq_len(s, manifest.model);
  p.model_seq_limit = model_seq_limit(manifest.model);
  namespace fs = std::filesystem;
  if (fs::exists(fs::path(s.model_dir) / "tokenizer.json") || fs::exists(fs::path(s.model_dir) / "tokenizer.model"))
    p.tokenizer = Tokenizer::load(s.model_dir);
  return p;
}

}  // namespace tpshard::tprun
