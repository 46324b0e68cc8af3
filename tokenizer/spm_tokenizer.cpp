// spm_tokenizer.cpp: libsentencepiece-backed Tokenizer.
#include "tokenizer/spm_tokenizer.h"

#include <algorithm>

#include <sentencepiece_processor.h>

#include "format/error.h"
#include "tokenizer/utf8.h"

namespace tpshard {

SpmTokenizer::SpmTokenizer() : sp_(std::make_unique<sentencepiece::SentencePieceProcessor>()) {}
SpmTokenizer::~SpmTokenizer() = default;

std::unique_ptr<SpmTokenizer> SpmTokenizer::from_file(const std::string& model_path, const TokenizerSideConfig& side) {
  std::unique_ptr<SpmTokenizer> t(new SpmTokenizer());
  t->path_ = model_path;
  const auto status = t->sp_->Load(model_path);
  if (!status.ok())
    throw Error(model_path + ": sentencepiece cannot load it (" + status.ToString() + ")",
                "is this a SentencePiece tokenizer.model? re-download it");
  const int n = t->sp_->GetPieceSize();
  for (int id = 0; id < n; ++id) {
    if (!t->sp_->IsControl(id) && !t->sp_->IsUnknown(id)) continue;
    AddedToken tok;
    tok.id = id;
    tok.content = t->sp_->IdToPiece(id);
    tok.special = true;
    t->specials_.add(tok, tok.content);
  }
  // tokenizer_config.json's added tokens that are normal pieces of the model (InternLM2's <|im_start|>):
  // matched in text like the control pieces, as transformers' slow tokenizers do.
  for (const AddedToken& tok : side.added_tokens) {
    if (tok.id >= n || t->sp_->IsControl(tok.id) || t->sp_->IsUnknown(tok.id) || t->sp_->IdToPiece(tok.id) != tok.content)
      continue;
    t->specials_.add(tok, tok.content);
    if (tok.special) t->added_special_.insert(tok.id);
  }
  t->add_bos_ = side.add_bos_token.value_or(true);
  t->add_eos_ = side.add_eos_token.value_or(false);
  t->bos_id_ = side.bos_token.empty() ? t->sp_->bos_id() : t->token_to_id(side.bos_token);
  if (t->bos_id_ < 0 && side.bos_token_id >= 0 && side.bos_token_id < n) t->bos_id_ = side.bos_token_id;
  for (int32_t id : side.eos_token_ids)
    if (id >= 0 && id < n) t->eos_ids_.push_back(id);
  const int32_t eos = side.eos_token.empty() ? t->sp_->eos_id() : t->token_to_id(side.eos_token);
  if (eos >= 0 && std::find(t->eos_ids_.begin(), t->eos_ids_.end(), eos) == t->eos_ids_.end()) t->eos_ids_.push_back(eos);
  t->model_max_length_ = side.model_max_length;
  return t;
}

std::vector<int32_t> SpmTokenizer::encode(const std::string& text_in, bool add_special_tokens) const {
  const std::string text = utf8::is_valid(text_in) ? text_in : utf8::sanitize(text_in);
  std::vector<int32_t> ids;
  if (add_special_tokens && add_bos_ && bos_id_ >= 0) ids.push_back(bos_id_);
  std::vector<TextSegment> segs;
  specials_.split(text, segs);
  std::vector<int> piece_ids;
  for (const auto& s : segs) {
    if (s.id >= 0) {
      ids.push_back(s.id);
      continue;
    }
    const auto status = sp_->Encode(std::string_view(text).substr(s.begin, s.end - s.begin), &piece_ids);
    if (!status.ok()) throw Error(path_ + ": sentencepiece encode failed (" + status.ToString() + ")", "please report it with the input");
    ids.insert(ids.end(), piece_ids.begin(), piece_ids.end());
  }
  if (add_special_tokens && add_eos_ && !eos_ids_.empty()) ids.push_back(eos_ids_.front());
  return ids;
}

std::string SpmTokenizer::decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const {
  const int n = sp_->GetPieceSize();
  std::vector<int> keep;
  keep.reserve(ids.size());
  for (int32_t id : ids) {
    if (id < 0 || id >= n)
      throw Error(path_ + ": decode: token id " + std::to_string(id) + " is not in the vocabulary (size " + std::to_string(n) + ")",
                  "pass ids this tokenizer has (0 up to its vocabulary size - 1); these come from a different tokenizer or model");
    if (skip_special_tokens && is_special(id)) continue;
    keep.push_back(id);
  }
  std::string out;
  const auto status = sp_->Decode(keep, &out);
  if (!status.ok()) throw Error(path_ + ": sentencepiece decode failed (" + status.ToString() + ")", "please report it with the ids");
  return out;
}

int64_t SpmTokenizer::vocab_size() const { return sp_->GetPieceSize(); }

bool SpmTokenizer::is_special(int32_t id) const {
  return id >= 0 && id < sp_->GetPieceSize() && (sp_->IsControl(id) || sp_->IsUnknown(id) || added_special_.count(id));
}

std::string SpmTokenizer::id_to_token(int32_t id) const {
  if (id < 0 || id >= sp_->GetPieceSize()) return {};
  return sp_->IdToPiece(id);
}

int32_t SpmTokenizer::token_to_id(const std::string& token) const {
  const int id = sp_->PieceToId(token);
  // PieceToId answers unk_id for unknown pieces; only the unk piece itself maps to it.
  if (id == sp_->unk_id() && token != sp_->IdToPiece(id)) return -1;
  return id;
}

}  // namespace tpshard
