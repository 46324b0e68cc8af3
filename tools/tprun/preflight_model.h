// preflight_model.h: what tprun's preflight checks may read of the model without loading any weight:
// the manifest's config (sequence limit, BOS ids) and the tokenizer. Lets request errors (prompt too
// long for --max-seq-len, bad JSONL lines, too few eval records) fail in seconds, before the launcher
// starts workers or any shard is read.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "model/manifest.h"
#include "runtime/generate.h"
#include "runtime/session_types.h"
#include "tokenizer/tokenizer.h"

namespace tpshard::tprun {

struct PreflightModel {
  Manifest manifest;                     ///< s.model_dir's manifest.json (its model config: manifest.model)
  std::unique_ptr<Tokenizer> tokenizer;  ///< nullptr: the model dir has no tokenizer (no_tokenizer_error)
  int64_t max_seq_len = 0;               ///< positions per kv_cache slot, as the backends compute it
  int64_t model_seq_limit = 0;           ///< the model's own context (model_seq_limit in runtime/generate.h)
};

/// Reads s.model_dir's manifest and tokenizer. Throws the Errors the backends throw for the same
/// problems (no manifest, --max-seq-len above the model's limit), with the same text.
inline PreflightModel load_preflight_model(const SessionOptions& s) {
  PreflightModel p;
  p.manifest = load_manifest(s.model_dir);
  const Manifest& manifest = p.manifest;
  p.max_seq_len = effective_max_seq_len(s, manifest.model);
  p.model_seq_limit = model_position_limit(manifest.model);
  p.tokenizer = load_model_tokenizer(s.model_dir, manifest.model);
  return p;
}

/// The error of a command that needs a tokenizer (generate, chat, eval) on a model directory without
/// tokenizer.json or tokenizer.model; thrown by the preflight checks (before any weight loads) and by
/// the run (a worker whose launcher ran them).
inline Error no_tokenizer_error(const std::string& model_dir) {
  return Error(model_dir + ": the model directory has no tokenizer.json or tokenizer.model",
               "copy the model's tokenizer.json next to manifest.json (tpshard convert copies it when the "
               "checkpoint has one), or use `tprun MODEL logits --ids ...`");
}

/// load_preflight_model, throwing no_tokenizer_error when the directory has no tokenizer.
inline PreflightModel load_preflight_model_with_tokenizer(const SessionOptions& s) {
  PreflightModel m = load_preflight_model(s);
  if (!m.tokenizer) throw no_tokenizer_error(s.model_dir);
  return m;
}

}  // namespace tpshard::tprun
