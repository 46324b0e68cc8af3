// hf_tokenizer.cpp: loading tokenizer.json and running the encode/decode pipelines.
#include "tokenizer/hf_tokenizer.h"
#include "tokenizer/token_id.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>

#include <nlohmann/json.hpp>

#include "format/error.h"
#include "format/json_depth.h"
#include "format/json_error.h"
#include "tokenizer/utf8.h"

namespace tpshard {
namespace {

using nlohmann::json;

std::unique_ptr<BpeModel> make_model(const json& m, bool byte_level, const std::string& path) {
  std::string type = m.value("type", "");
  if (type.empty() && m.contains("merges")) type = "BPE";  // old files omit the type
  if (type != "BPE")
    throw Error(path + ": unsupported model type '" + type + "'", "supported: BPE (byte-level or with byte_fallback)");
  auto str_or_empty = [&](const char* key) {
    return m.contains(key) && m.at(key).is_string() ? m.at(key).get<std::string>() : std::string();
  };
  if (!str_or_empty("continuing_subword_prefix").empty() || !str_or_empty("end_of_word_suffix").empty())
    throw Error(path + ": unsupported BPE option continuing_subword_prefix/end_of_word_suffix",
                "only GPT-2/Llama style BPE is supported");
  if (m.contains("dropout") && m.at("dropout").is_number() && m.at("dropout").get<double>() > 0)
    throw Error(path + ": unsupported BPE dropout > 0", "set \"dropout\": null for inference");
  BpeOptions opts;
  opts.byte_level = byte_level;
  opts.byte_fallback = m.value("byte_fallback", false);
  opts.fuse_unk = m.value("fuse_unk", false);
  opts.ignore_merges = m.value("ignore_merges", false);
  opts.unk_token = str_or_empty("unk_token");

  std::unordered_map<std::string, int32_t> vocab;
  vocab.reserve(m.at("vocab").size() * 2);
  for (const auto& item : m.at("vocab").items())
    vocab.emplace(item.key(), json_token_id(item.value(), path + ": model.vocab[\"" + item.key() + "\"]"));
  std::vector<std::pair<std::string, std::string>> merges;
  const json& jm = m.contains("merges") ? m.at("merges") : json::array();
  merges.reserve(jm.size());
  for (const auto& x : jm) {
    if (x.is_array() && x.size() == 2) {
      merges.emplace_back(x[0].get<std::string>(), x[1].get<std::string>());
    } else if (x.is_string()) {
      const std::string s = x.get<std::string>();
      const size_t sp = s.find(' ');
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
        throw Error(path + ": merge '" + s + "' is not two tokens separated by one space", "fix the file");
      merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
    } else {
      throw Error(path + ": model.merges holds an entry that is neither \"a b\" nor [a, b]", "fix the file");
    }
  }
  return std::make_unique<BpeModel>(std::move(vocab), merges, std::move(opts));
}

// TemplateProcessing "single" -> ids before and after the text; ByteLevel is offsets-only (no ids).
void parse_post_processor(const json& p, const std::string& path, std::vector<int32_t>& prefix, std::vector<int32_t>& suffix) {
  if (p.is_null()) return;
  const std::string type = p.value("type", "");
  if (type == "ByteLevel") return;
  if (type == "Sequence") {
    for (const auto& x : p.at("processors")) parse_post_processor(x, path, prefix, suffix);
    return;
  }
  if (type != "TemplateProcessing")
    throw Error(path + ": unsupported post_processor type '" + type + "'",
                "supported: TemplateProcessing, ByteLevel, Sequence of those");
  bool seen_text = false;
  for (const auto& piece : p.at("single")) {
    if (piece.contains("Sequence")) {
      seen_text = true;
      continue;
    }
    const std::string name = piece.at("SpecialToken").at("id").get<std::string>();
    const auto& st = p.at("special_tokens");
    if (!st.contains(name))
      throw Error(path + ": post_processor template names special token '" + name + "' missing from its special_tokens", "fix the file");
    for (const auto& id : st.at(name).at("ids"))
      (seen_text ? suffix : prefix).push_back(json_token_id(id, path + ": post_processor special token '" + name + "'"));
  }
}

}  // namespace

std::unique_ptr<HfTokenizer> HfTokenizer::from_file(const std::string& json_path, const TokenizerSideConfig& side) {
  std::ifstream in(json_path);
  if (!in) {
    const int err = errno;
    throw Error(json_path + ": cannot open (" + std::strerror(err) + ")",
                err == EACCES ? "make it readable for this user (its owner can run chmod a+r " + json_path + ")"
                              : "check the path and permissions");
  }
  json j;
  try {
    j = json::parse(in, json_depth_guard(json_path));
  } catch (const json::exception& e) {
    throw Error(json_path + ": not valid JSON (" + json_error_text(e) + ")", "re-download the tokenizer.json");
  }
  std::unique_ptr<HfTokenizer> t(new HfTokenizer());
  t->path_ = json_path;
  try {
    t->normalizer_ = make_normalizer(j.value("normalizer", json()));
    t->pre_tokenizer_ = make_pre_tokenizer(j.value("pre_tokenizer", json()));
    t->decoder_ = make_decoder(j.value("decoder", json()));
    t->model_ = make_model(j.at("model"), t->pre_tokenizer_ && t->pre_tokenizer_->is_byte_level(), json_path);
    parse_post_processor(j.value("post_processor", json()), json_path, t->prefix_ids_, t->suffix_ids_);
  } catch (const Error& e) {
    // Component errors say "tokenizer.json: ..." or name the component; report the real path.
    const std::string what = e.what();
    if (what.rfind("tokenizer.json:", 0) == 0) throw Error(json_path + what.substr(14), e.hint());
    if (what.rfind(json_path, 0) == 0) throw;
    throw Error(json_path + ": " + what, e.hint());
  } catch (const json::exception& e) {
    throw Error(json_path + ": unexpected layout (" + json_error_text(e) + ")", "is this a Hugging Face tokenizer.json?");
  }

  t->vocab_size_ = t->model_->size();
  try {
    for (const auto& a : j.value("added_tokens", json::array())) {
      AddedToken tok;
      tok.id = json_token_id(a.at("id"), json_path + ": added_tokens id");
      tok.content = a.at("content").get<std::string>();
      tok.special = a.value("special", false);
      tok.lstrip = a.value("lstrip", false);
      tok.rstrip = a.value("rstrip", false);
      tok.normalized = a.value("normalized", !tok.special);
      tok.single_word = a.value("single_word", false);
      if (tok.id < 0) throw Error(json_path + ": added token '" + tok.content + "' has a negative id", "fix the file");
      t->vocab_size_ = std::max<int64_t>(t->vocab_size_, int64_t{tok.id} + 1);
      t->added_by_content_.emplace(tok.content, tok.id);
      if (tok.normalized) {
        // Matched in normalized text by its normalized form, which is also what decode and
        // id_to_token give back (HF tokenizers 0.2x behaves so); token_to_id knows the original.
        std::string pattern = tok.content;
        if (t->normalizer_) t->normalizer_->normalize(pattern);
        t->normalized_matcher_.add(tok, pattern);
        tok.content = pattern;
      } else {
        t->raw_matcher_.add(tok, tok.content);
      }
      t->added_by_id_.emplace(tok.id, std::move(tok));
    }
  } catch (const json::exception& e) {
    throw Error(json_path + ": added_tokens: unexpected layout (" + json_error_text(e) + ")",
                "each added token needs an integer \"id\" and a string \"content\"; re-download the tokenizer.json");
  }

  // BOS/EOS: tokenizer_config.json / special_tokens_map.json first, then the post-processor
  // template, then config.json / generation_config.json.
  if (!side.bos_token.empty()) t->bos_id_ = t->token_to_id(side.bos_token);
  if (t->bos_id_ < 0 && !t->prefix_ids_.empty()) t->bos_id_ = t->prefix_ids_.front();
  if (t->bos_id_ < 0 && side.bos_token_id >= 0 && side.bos_token_id < t->vocab_size_) t->bos_id_ = side.bos_token_id;
  auto add_eos = [&](int32_t id) {
    if (id >= 0 && id < t->vocab_size_ && std::find(t->eos_ids_.begin(), t->eos_ids_.end(), id) == t->eos_ids_.end())
      t->eos_ids_.push_back(id);
  };
  for (int32_t id : side.eos_token_ids) add_eos(id);
  if (!side.eos_token.empty()) add_eos(t->token_to_id(side.eos_token));
  if (t->eos_ids_.empty()) {
    for (const char* name : {"</s>", "<|endoftext|>", "<|end_of_text|>", "<|im_end|>", "<|eot_id|>"}) {
      const auto it = t->added_by_content_.find(name);
      if (it != t->added_by_content_.end() && t->is_special(it->second)) { add_eos(it->second); break; }
    }
  }
  // add_bos_token / add_eos_token in tokenizer_config.json override the template, as
  // transformers' LlamaTokenizerFast.update_post_processor does.
  if (side.add_bos_token.has_value() && t->bos_id_ >= 0) {
    auto& p = t->prefix_ids_;
    const bool has = !p.empty() && p.front() == t->bos_id_;
    if (*side.add_bos_token && !has) p.insert(p.begin(), t->bos_id_);
    if (!*side.add_bos_token && has) p.erase(p.begin());
  }
  if (side.add_eos_token.has_value() && !side.eos_token.empty()) {
    const int32_t eos = t->token_to_id(side.eos_token);
    auto& s = t->suffix_ids_;
    const bool has = !s.empty() && s.back() == eos;
    if (*side.add_eos_token && !has && eos >= 0) s.push_back(eos);
    if (!*side.add_eos_token && has) s.pop_back();
  }
  t->model_max_length_ = side.model_max_length;
  return t;
}

void HfTokenizer::encode_plain(std::string_view text, bool at_start, std::vector<int32_t>& ids, BpeWordCache* cache) const {
  if (text.empty()) return;
  if (!pre_tokenizer_) {
    model_->encode_word(text, ids, cache);
    return;
  }
  thread_local Pieces pieces;
  pieces.buf.assign(text.data(), text.size());
  pieces.spans.assign(1, {0, text.size()});
  pre_tokenizer_->split(pieces, at_start);
  for (size_t k = 0; k < pieces.spans.size(); ++k) model_->encode_word(pieces.piece(k), ids, cache);
}

std::vector<int32_t> HfTokenizer::encode(const std::string& text_in, bool add_special_tokens) const {
  std::string sanitized;
  const bool valid = utf8::is_valid(text_in);
  if (!valid) sanitized = utf8::sanitize(text_in);
  const std::string& text = valid ? text_in : sanitized;

  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + prefix_ids_.size() + suffix_ids_.size() + 1);
  if (add_special_tokens) ids.insert(ids.end(), prefix_ids_.begin(), prefix_ids_.end());
  BpeWordCache* cache = model_->thread_cache();
  std::vector<TextSegment> raw_segs, norm_segs;
  if (raw_matcher_.empty()) raw_segs.push_back({0, text.size(), -1});
  else raw_matcher_.split(text, raw_segs);
  std::string s;
  for (const auto& seg : raw_segs) {
    if (seg.id >= 0) {
      ids.push_back(seg.id);
      continue;
    }
    s.assign(text, seg.begin, seg.end - seg.begin);
    if (normalizer_) normalizer_->normalize(s);
    const bool seg_at_start = seg.begin == 0;
    if (normalized_matcher_.empty()) {
      encode_plain(s, seg_at_start, ids, cache);
      continue;
    }
    normalized_matcher_.split(s, norm_segs);
    for (const auto& ns : norm_segs) {
      if (ns.id >= 0) ids.push_back(ns.id);
      else encode_plain(std::string_view(s).substr(ns.begin, ns.end - ns.begin), seg_at_start && ns.begin == 0, ids, cache);
    }
  }
  if (add_special_tokens) ids.insert(ids.end(), suffix_ids_.begin(), suffix_ids_.end());
  return ids;
}

std::string HfTokenizer::decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    const auto it = added_by_id_.find(id);
    if (it != added_by_id_.end()) {
      if (!(skip_special_tokens && it->second.special)) tokens.push_back(it->second.content);
      continue;
    }
    const std::string* tok = model_->id_to_token(id);
    if (!tok)
      throw Error(path_ + ": decode: token id " + std::to_string(id) + " is not in the vocabulary (size " +
                      std::to_string(vocab_size_) + ")",
                  "pass ids this tokenizer has (0 up to its vocabulary size - 1); these come from a different tokenizer or model");
    tokens.push_back(*tok);
  }
  if (!decoder_) {
    std::string out;
    for (size_t k = 0; k < tokens.size(); ++k) out += (k ? " " : "") + tokens[k];
    return out;
  }
  decoder_->decode_chain(tokens);
  std::string out;
  for (const auto& t : tokens) out += t;
  return out;
}

bool HfTokenizer::is_special(int32_t id) const {
  const auto it = added_by_id_.find(id);
  return it != added_by_id_.end() && it->second.special;
}

std::string HfTokenizer::id_to_token(int32_t id) const {
  const auto it = added_by_id_.find(id);
  if (it != added_by_id_.end()) return it->second.content;
  const std::string* t = model_->id_to_token(id);
  return t ? *t : std::string();
}

int32_t HfTokenizer::token_to_id(const std::string& token) const {
  const auto it = added_by_content_.find(token);
  if (it != added_by_content_.end()) return it->second;
  return model_->token_to_id(token);
}

}  // namespace tpshard
