// spm_tokenizer.h: a Tokenizer over a SentencePiece tokenizer.model through libsentencepiece, for
// model dirs that have no tokenizer.json. Control and unknown pieces ("<s>", "</s>", "<unk>") and the
// tokenizer_config.json added_tokens_decoder entries that are pieces of the model (InternLM2's
// <|im_start|>, <|im_end|>) written in the text are matched as tokens first (as transformers'
// LlamaTokenizer / InternLM2Tokenizer do); everything else is spm's own.
#pragma once
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "tokenizer/added_tokens.h"
#include "tokenizer/config_files.h"
#include "tokenizer/tokenizer.h"

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace tpshard {

class SpmTokenizer : public Tokenizer {
 public:
  /// Throws Error naming model_path when sentencepiece cannot load it.
  static std::unique_ptr<SpmTokenizer> from_file(const std::string& model_path, const TokenizerSideConfig& side);
  ~SpmTokenizer() override;

  /// BOS is added when add_special_tokens and add_bos_token (default true, as for Llama);
  /// EOS when add_eos_token (default false).
  std::vector<int32_t> encode(const std::string& text, bool add_special_tokens = true) const override;
  std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens = false) const override;
  int64_t vocab_size() const override;
  int32_t bos_id() const override { return bos_id_; }
  std::vector<int32_t> eos_ids() const override { return eos_ids_; }
  bool is_special(int32_t id) const override;
  std::string id_to_token(int32_t id) const override;
  int32_t token_to_id(const std::string& token) const override;
  int64_t model_max_length() const override { return model_max_length_; }

 private:
  SpmTokenizer();
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
  AddedTokenMatcher specials_;
  std::set<int32_t> added_special_;  ///< added_tokens_decoder entries marked special (skipped by decode)
  bool add_bos_ = true, add_eos_ = false;
  int32_t bos_id_ = -1;
  std::vector<int32_t> eos_ids_;
  int64_t model_max_length_ = 0;
  std::string path_;
};

}  // namespace tpshard
