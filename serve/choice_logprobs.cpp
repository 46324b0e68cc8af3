// choice_logprobs.cpp: see choice_logprobs.h.
#include "serve/choice_logprobs.h"

#include <algorithm>

namespace tpshard::serve {
namespace {

using json = nlohmann::ordered_json;

json bytes_of(const std::string& s) {
  json b = json::array();
  for (const char c : s) b.push_back(static_cast<int>(static_cast<unsigned char>(c)));
  return b;
}

}  // namespace

ChoiceLogprobs::ChoiceLogprobs(const Tokenizer& tok, const std::vector<int32_t>& prompt, bool echo, int top, bool chat)
    : tok_(tok), prompt_(prompt), echo_(echo), top_(top), chat_(chat) {
  if (!echo_ && !prompt_.empty()) prev_ = prompt_.back();
  take();  // empty lists
}

void ChoiceLogprobs::add(const GenerationResult& so_far) {
  if (echo_ && !prompt_added_) {
    for (size_t k = 0; k < prompt_.size(); ++k)  // the first prompt token has no prediction
      put(prompt_[k], k == 0 || k - 1 >= so_far.prompt_logprobs.size() ? nullptr : &so_far.prompt_logprobs[k - 1]);
  }
  prompt_added_ = true;
  const size_t end = std::min(so_far.text_tokens, so_far.output_ids.size());
  for (; outputs_added_ < end; ++outputs_added_)
    put(so_far.output_ids[outputs_added_],
        outputs_added_ < so_far.logprobs.size() ? &so_far.logprobs[outputs_added_] : nullptr);
}

void ChoiceLogprobs::put(int32_t token, const TokenLogprob* lp) {
  // The text token id adds to the returned text after prev_ (special tokens skipped, as in decoded output):
  // decode({prev_, id}) minus decode({prev_}), so a SentencePiece "▁upon" after "Once" reads " upon" and
  // "▁Once" right after BOS reads "Once"; "" for a special token. decode({prev_}) is shared by the token
  // and its alternatives. A token is shown as that text, a special token as its own text ("<s>").
  const bool prev_ok = prev_ >= 0 && prev_ < tok_.vocab_size();
  const std::string before = prev_ok ? tok_.decode({prev_}, true) : std::string();
  auto special = [&](int32_t id) { return id >= 0 && id < tok_.vocab_size() && tok_.is_special(id); };
  auto adds = [&](int32_t id) -> std::string {
    if (id < 0 || id >= tok_.vocab_size() || special(id)) return {};
    if (!prev_ok) return tok_.decode({id}, true);
    const std::string both = tok_.decode({prev_, id}, true);
    return both.compare(0, before.size(), before) == 0 ? both.substr(before.size()) : tok_.decode({id}, true);
  };
  auto shown = [&](int32_t id) { return special(id) ? tok_.decode({id}, false) : adds(id); };
  const std::string added = adds(token);
  const std::string s = special(token) ? tok_.decode({token}, false) : added;
  if (chat_) {
    json top = json::array();
    for (size_t j = 0; lp && j < lp->top.size() && j < static_cast<size_t>(top_); ++j) {
      const std::string t = shown(lp->top[j].first);
      top.push_back({{"token", t}, {"logprob", lp->top[j].second}, {"bytes", bytes_of(t)}});
    }
    content_.push_back({{"token", s}, {"logprob", lp ? json(lp->logprob) : json()}, {"bytes", bytes_of(s)},
                        {"top_logprobs", std::move(top)}});
  } else {
    tokens_.push_back(s);
    text_offset_.push_back(offset_);
    token_logprobs_.push_back(lp ? json(lp->logprob) : json());
    // {token string: log-probability}: the `logprobs` most likely tokens and the chosen one (OpenAI's rule:
    // "the logprob of the sampled token" always, so up to logprobs + 1 entries); the first of equal strings
    // kept; null for a token without a log-probability (the first prompt token)
    json top;
    if (lp) {
      top = json::object();
      for (size_t j = 0; j < lp->top.size() && j < static_cast<size_t>(top_); ++j) {
        const std::string t = shown(lp->top[j].first);
        if (!top.contains(t)) top[t] = lp->top[j].second;  // lp->top is most likely first: kept in that order
      }
      if (!top.contains(s)) top[s] = lp->logprob;  // not among them: less likely than all, so last
    }
    top_logprobs_.push_back(std::move(top));
  }
  offset_ += added.size();  // what it adds to the returned text
  prev_ = token;
}

json ChoiceLogprobs::take() {
  json out;
  if (chat_) {
    out = {{"content", std::move(content_)}, {"refusal", nullptr}};
    content_ = json::array();
  } else {
    out = {{"tokens", std::move(tokens_)}, {"token_logprobs", std::move(token_logprobs_)},
           {"top_logprobs", std::move(top_logprobs_)}, {"text_offset", std::move(text_offset_)}};
    tokens_ = json::array();
    token_logprobs_ = json::array();
    top_logprobs_ = json::array();
    text_offset_ = json::array();
  }
  return out;
}

}  // namespace tpshard::serve
