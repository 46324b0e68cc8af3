// stream_decoder.cpp: StreamDecoder (HF tokenizers DecodeStream algorithm; see tokenizer.h).
#include "tokenizer/tokenizer.h"

namespace tpshard {
namespace {

bool ends_with_replacement(const std::string& s) {
  return s.size() >= 3 && s.compare(s.size() - 3, 3, "\xEF\xBF\xBD") == 0;
}

}  // namespace

StreamDecoder::StreamDecoder(const Tokenizer& tok, bool skip_special_tokens) : tok_(tok), skip_special_(skip_special_tokens) {}

std::string StreamDecoder::push(int32_t id) {
  ids_.push_back(id);
  std::string text;
  try {
    text = tok_.decode(ids_, skip_special_);
  } catch (...) {
    ids_.pop_back();  // an unknown id leaves the stream as it was, then the Error propagates
    throw;
  }
  // Hold back while the text has not grown past the context or ends in an incomplete character
  // (decoders turn a partial UTF-8 sequence into U+FFFD).
  if (text.size() <= emitted_bytes_ || ends_with_replacement(text)) return {};
  std::string out = text.substr(emitted_bytes_);
  // The ids not yet emitted become the context of the next push.
  ids_.erase(ids_.begin(), ids_.begin() + static_cast<std::ptrdiff_t>(read_index_));
  read_index_ = ids_.size();
  prefix_text_ = tok_.decode(ids_, skip_special_);
  emitted_bytes_ = prefix_text_.size();
  return out;
}

void StreamDecoder::prime(const std::vector<int32_t>& context) {
  constexpr size_t kContextIds = 6;  // enough for any decoder's look-behind (byte fallback, Strip)
  std::vector<int32_t> ids;
  for (size_t i = context.size() > kContextIds ? context.size() - kContextIds : 0; i < context.size(); ++i)
    if (context[i] >= 0 && context[i] < tok_.vocab_size()) ids.push_back(context[i]);
  const std::string text = tok_.decode(ids, skip_special_);
  if (ends_with_replacement(text)) return;  // the context ends inside a character: start plain
  ids_ = std::move(ids);
  read_index_ = ids_.size();
  prefix_text_ = text;
  emitted_bytes_ = text.size();
}

std::string StreamDecoder::flush() {
  const std::string text = tok_.decode(ids_, skip_special_);
  std::string out = text.size() > emitted_bytes_ ? text.substr(emitted_bytes_) : std::string();
  ids_.clear();
  read_index_ = 0;
  prefix_text_.clear();
  emitted_bytes_ = 0;
  return out;
}

}  // namespace tpshard
