// hf_tokenizer.h: a Tokenizer built from a Hugging Face tokenizer.json: added tokens -> normalizer
// -> pre-tokenizer -> BPE model -> post-processor (TemplateProcessing) for encode, and
// added tokens / vocab -> decoder chain for decode. Pipeline order as HF tokenizers'
// TokenizerImpl::encode_single_sequence / decode.
#pragma once
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/added_tokens.h"
#include "tokenizer/bpe.h"
#include "tokenizer/config_files.h"
#include "tokenizer/decoders.h"
#include "tokenizer/normalizers.h"
#include "tokenizer/pre_tokenizers.h"
#include "tokenizer/tokenizer.h"

namespace tpshard {

class HfTokenizer : public Tokenizer {
 public:
  /// Parse json_path (a tokenizer.json). side: facts from the files beside it (may be default).
  /// Throws Error naming the file, or an unsupported component's "type".
  static std::unique_ptr<HfTokenizer> from_file(const std::string& json_path, const TokenizerSideConfig& side);

  std::vector<int32_t> encode(const std::string& text, bool add_special_tokens = true) const override;
  std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens = false) const override;
  int64_t vocab_size() const override { return vocab_size_; }
  int32_t bos_id() const override { return bos_id_; }
  std::vector<int32_t> eos_ids() const override { return eos_ids_; }
  bool is_special(int32_t id) const override;
  std::string id_to_token(int32_t id) const override;
  int32_t token_to_id(const std::string& token) const override;
  int64_t model_max_length() const override { return model_max_length_; }

 private:
  HfTokenizer() = default;
  void encode_plain(std::string_view text, bool at_start, std::vector<int32_t>& ids, BpeWordCache* cache) const;

  std::unique_ptr<BpeModel> model_;
  std::unique_ptr<Normalizer> normalizer_;
  std::unique_ptr<PreTokenizer> pre_tokenizer_;
  std::unique_ptr<Decoder> decoder_;
  AddedTokenMatcher raw_matcher_;         ///< added tokens with normalized = false
  AddedTokenMatcher normalized_matcher_;  ///< added tokens with normalized = true
  std::unordered_map<int32_t, AddedToken> added_by_id_;
  std::unordered_map<std::string, int32_t> added_by_content_;
  std::vector<int32_t> prefix_ids_, suffix_ids_;  ///< post-processor template around the text
  int64_t vocab_size_ = 0;
  int32_t bos_id_ = -1;
  std::vector<int32_t> eos_ids_;
  int64_t model_max_length_ = 0;
  std::string path_;
};

}  // namespace tpshard
