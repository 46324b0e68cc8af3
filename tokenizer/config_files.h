// config_files.h: what tokenizer.json does not say but the files beside it do: BOS/EOS tokens and
// add_bos_token/add_eos_token (tokenizer_config.json, special_tokens_map.json), EOS ids for
// generation (generation_config.json, config.json) and model_max_length. All files optional.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tokenizer/added_tokens.h"

namespace tpshard {

struct TokenizerSideConfig {
  std::optional<bool> add_bos_token;   ///< tokenizer_config.json
  std::optional<bool> add_eos_token;   ///< tokenizer_config.json
  std::string bos_token;               ///< content; tokenizer_config.json, else special_tokens_map.json
  std::string eos_token;               ///< content; same sources
  std::vector<int32_t> eos_token_ids;  ///< generation_config.json, then config.json (int or list)
  int32_t bos_token_id = -1;           ///< generation_config.json, then config.json
  int64_t model_max_length = 0;        ///< 0 when absent or HF's "unset" sentinel (>= 1e18)
  /// tokenizer_config.json "added_tokens_decoder" ({"ID": {content, special, lstrip, rstrip, ...}}): the
  /// tokens transformers' slow (SentencePiece) tokenizers match in text before the model, e.g.
  /// InternLM2's <|im_start|> / <|im_end|>. Used by the SentencePiece tokenizer (spm_tokenizer.h).
  std::vector<AddedToken> added_tokens;
};

/// Read the optional files of dir. Throws Error naming a file that exists but is not valid JSON.
TokenizerSideConfig read_side_config(const std::string& dir);

}  // namespace tpshard
