// decoders.cpp: tokenizer.json decoders (HF tokenizers src/decoders semantics).
#include "tokenizer/decoders.h"

#include <nlohmann/json.hpp>

#include "format/error.h"
#include "tokenizer/pre_tokenizers.h"  // metaspace_replacement
#include "tokenizer/utf8.h"

namespace tpshard {
namespace {

const char* const kReplacementChar = "\xEF\xBF\xBD";

class ByteLevel : public Decoder {
 public:
  // Every token whose characters are all in the byte alphabet becomes those bytes; any other
  // token (e.g. an added token with a plain space) contributes its UTF-8 bytes as they are.
  // The result is one string; invalid UTF-8 becomes U+FFFD (from_utf8_lossy).
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string bytes, tok_bytes;
    for (const auto& t : tokens) {
      tok_bytes.clear();
      bool ok = true;
      size_t i = 0;
      while (i < t.size()) {
        const int b = utf8::cp_to_byte(utf8::next_cp(t, i));
        if (b < 0) { ok = false; break; }
        tok_bytes += static_cast<char>(b);
      }
      bytes += ok ? tok_bytes : t;
    }
    tokens.assign(1, utf8::sanitize(bytes));
  }
};

class Replace : public Decoder {
 public:
  Replace(std::string from, std::string to) : from_(std::move(from)), to_(std::move(to)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    if (from_.empty()) return;
    for (auto& t : tokens) {
      std::string out;
      size_t pos = 0;
      for (size_t hit; (hit = t.find(from_, pos)) != std::string::npos; pos = hit + from_.size()) {
        out.append(t, pos, hit - pos);
        out += to_;
      }
      out.append(t, pos, std::string::npos);
      t.swap(out);
    }
  }

 private:
  std::string from_, to_;
};

int parse_byte_token(const std::string& t) {
  if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return -1;
  auto hex = [](char c) { return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1; };
  const int hi = hex(t[3]), lo = hex(t[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

class ByteFallback : public Decoder {
 public:
  // Runs of <0xXX> tokens become their bytes when those form valid UTF-8, else one U+FFFD per token.
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::vector<std::string> out;
    std::string pending;
    auto flush = [&] {
      if (pending.empty()) return;
      if (utf8::is_valid(pending)) out.push_back(pending);
      else
        for (size_t k = 0; k < pending.size(); ++k) out.emplace_back(kReplacementChar);
      pending.clear();
    };
    for (auto& t : tokens) {
      const int b = parse_byte_token(t);
      if (b >= 0) {
        pending += static_cast<char>(b);
      } else {
        flush();
        out.push_back(std::move(t));
      }
    }
    flush();
    tokens.swap(out);
  }
};

class Fuse : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string all;
    for (const auto& t : tokens) all += t;
    tokens.assign(1, std::move(all));
  }
};

class Strip : public Decoder {
 public:
  Strip(std::string content, size_t start, size_t stop) : content_(std::move(content)), start_(start), stop_(stop) {}
  // Per token: drop up to `start` leading and `stop` trailing copies of the content character.
  void decode_chain(std::vector<std::string>& tokens) const override {
    if (content_.empty()) return;
    for (auto& t : tokens) {
      size_t b = 0, e = t.size();
      for (size_t k = 0; k < start_ && t.compare(b, content_.size(), content_) == 0 && b + content_.size() <= e; ++k)
        b += content_.size();
      for (size_t k = 0; k < stop_ && e >= b + content_.size() && t.compare(e - content_.size(), content_.size(), content_) == 0; ++k)
        e -= content_.size();
      t = t.substr(b, e - b);
    }
  }

 private:
  std::string content_;
  size_t start_, stop_;
};

class Metaspace : public Decoder {
 public:
  Metaspace(std::string rep, bool prepend) : rep_(std::move(rep)), prepend_(prepend) {
    TPS_CHECK(!rep_.empty(), "Metaspace: empty replacement", "this is a bug in the caller (metaspace_replacement checks it)");
  }
  // The replacement character becomes a space, except in the first token when the pre-tokenizer
  // prepends one (prepend_scheme always/first): there every replacement character is dropped
  // (HF's decode_chain does exactly this).
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (size_t k = 0; k < tokens.size(); ++k) {
      std::string out;
      const std::string& t = tokens[k];
      const bool drop = k == 0 && prepend_;
      size_t pos = 0;
      for (size_t hit; (hit = t.find(rep_, pos)) != std::string::npos; pos = hit + rep_.size()) {
        out.append(t, pos, hit - pos);
        if (!drop) out += ' ';
      }
      out.append(t, pos, std::string::npos);
      tokens[k].swap(out);
    }
  }

 private:
  std::string rep_;
  bool prepend_;
};

class Sequence : public Decoder {
 public:
  explicit Sequence(std::vector<std::unique_ptr<Decoder>> parts) : parts_(std::move(parts)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (const auto& p : parts_) p->decode_chain(tokens);
  }

 private:
  std::vector<std::unique_ptr<Decoder>> parts_;
};

}  // namespace

std::unique_ptr<Decoder> make_decoder(const nlohmann::json& j) {
  if (j.is_null()) return nullptr;
  const std::string type = j.value("type", "");
  if (type == "ByteLevel") return std::make_unique<ByteLevel>();
  if (type == "ByteFallback") return std::make_unique<ByteFallback>();
  if (type == "Fuse") return std::make_unique<Fuse>();
  if (type == "Strip")
    return std::make_unique<Strip>(j.value("content", std::string(" ")), j.value("start", size_t{0}), j.value("stop", size_t{0}));
  if (type == "Replace") {
    const auto& pat = j.at("pattern");
    if (!pat.contains("String"))
      throw Error("tokenizer.json: decoder Replace with a Regex pattern is not supported", "only String patterns are");
    return std::make_unique<Replace>(pat.at("String").get<std::string>(), j.at("content").get<std::string>());
  }
  if (type == "Metaspace") {
    bool prepend = j.value("add_prefix_space", true);
    if (j.contains("prepend_scheme")) prepend = j.at("prepend_scheme").get<std::string>() != "never";
    return std::make_unique<Metaspace>(metaspace_replacement(j, "decoder"), prepend);
  }
  if (type == "Sequence") {
    std::vector<std::unique_ptr<Decoder>> parts;
    for (const auto& p : j.at("decoders"))
      if (auto d = make_decoder(p)) parts.push_back(std::move(d));
    return std::make_unique<Sequence>(std::move(parts));
  }
  throw Error("tokenizer.json: unsupported decoder type '" + type + "'",
              "supported: ByteLevel, ByteFallback, Fuse, Strip, Replace, Metaspace, Sequence");
}

}  // namespace tpshard
