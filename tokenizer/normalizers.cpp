// normalizers.cpp: tokenizer.json normalizers (HF tokenizers src/normalizers semantics).
#include "tokenizer/normalizers.h"

#include <cstdlib>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>
#include <utf8proc.h>

#include "format/error.h"
#include "tokenizer/regex.h"
#include "tokenizer/utf8.h"

namespace tpshard {
namespace {

class UnicodeForm : public Normalizer {
 public:
  explicit UnicodeForm(int options) : options_(options) {}
  // Only the non-ASCII runs (each with the ASCII character before it, which may compose with a
  // following combining mark) go through utf8proc: ASCII is its own normal form in every form,
  // and no canonical composition has an ASCII second character, so ASCII after a run is unaffected.
  void normalize(std::string& s) const override {
    size_t i = 0;
    while (i < s.size() && static_cast<unsigned char>(s[i]) < 0x80) ++i;
    if (i == s.size()) return;
    std::string out;
    out.reserve(s.size() + s.size() / 8);
    size_t done = 0;
    while (i < s.size()) {
      const size_t run_begin = i > done ? i - 1 : i;  // include the preceding ASCII character
      size_t run_end = i;
      while (run_end < s.size() && static_cast<unsigned char>(s[run_end]) >= 0x80) ++run_end;
      out.append(s, done, run_begin - done);
      map_run(std::string_view(s).substr(run_begin, run_end - run_begin), out);
      done = run_end;
      i = run_end;
      while (i < s.size() && static_cast<unsigned char>(s[i]) < 0x80) ++i;
    }
    out.append(s, done, std::string::npos);
    s.swap(out);
  }

 private:
  void map_run(std::string_view run, std::string& out) const {
    utf8proc_uint8_t* mapped = nullptr;
    const auto n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(run.data()),
                                static_cast<utf8proc_ssize_t>(run.size()), &mapped,
                                static_cast<utf8proc_option_t>(options_));
    if (n < 0) {  // cannot happen on sanitized input; keep the text as it is
      out.append(run.data(), run.size());
      return;
    }
    out.append(reinterpret_cast<const char*>(mapped), static_cast<size_t>(n));
    std::free(mapped);
  }
  int options_;
};

class Lowercase : public Normalizer {
 public:
  void normalize(std::string& s) const override {
    std::string out;
    out.reserve(s.size());
    size_t i = 0;
    while (i < s.size()) utf8::append_cp(out, static_cast<uint32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(utf8::next_cp(s, i)))));
    s.swap(out);
  }
};

class Prepend : public Normalizer {
 public:
  explicit Prepend(std::string p) : prefix_(std::move(p)) {}
  void normalize(std::string& s) const override {
    if (!s.empty()) s.insert(0, prefix_);
  }

 private:
  std::string prefix_;
};

class ReplaceString : public Normalizer {
 public:
  ReplaceString(std::string from, std::string to) : from_(std::move(from)), to_(std::move(to)) {}
  void normalize(std::string& s) const override {
    if (from_.empty() || s.find(from_) == std::string::npos) return;
    std::string out;
    out.reserve(s.size() + s.size() / 4);
    size_t pos = 0;
    for (size_t hit; (hit = s.find(from_, pos)) != std::string::npos; pos = hit + from_.size()) {
      out.append(s, pos, hit - pos);
      out += to_;
    }
    out.append(s, pos, std::string::npos);
    s.swap(out);
  }

 private:
  std::string from_, to_;
};

class ReplaceRegex : public Normalizer {
 public:
  ReplaceRegex(const std::string& pattern, std::string to) : re_(pattern, "normalizer Replace"), to_(std::move(to)) {}
  void normalize(std::string& s) const override {
    std::vector<std::pair<size_t, size_t>> spans;
    re_.find_all(s, spans);
    if (spans.empty()) return;
    std::string out;
    size_t pos = 0;
    for (const auto& [b, e] : spans) {
      out.append(s, pos, b - pos);
      out += to_;
      pos = e;
    }
    out.append(s, pos, std::string::npos);
    s.swap(out);
  }

 private:
  Regex re_;
  std::string to_;
};

class Strip : public Normalizer {
 public:
  Strip(bool left, bool right) : left_(left), right_(right) {}
  void normalize(std::string& s) const override {
    size_t b = 0, e = s.size();
    if (left_) {
      while (b < e) {
        size_t i = b;
        if (!utf8::is_whitespace(utf8::next_cp(s, i))) break;
        b = i;
      }
    }
    if (right_) {
      while (e > b) {
        size_t start = e - 1;
        while (start > b && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
        size_t i = start;
        if (!utf8::is_whitespace(utf8::next_cp(s, i))) break;
        e = start;
      }
    }
    s = s.substr(b, e - b);
  }

 private:
  bool left_, right_;
};

class Sequence : public Normalizer {
 public:
  explicit Sequence(std::vector<std::unique_ptr<Normalizer>> parts) : parts_(std::move(parts)) {}
  void normalize(std::string& s) const override {
    for (const auto& p : parts_) p->normalize(s);
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> parts_;
};

}  // namespace

std::unique_ptr<Normalizer> make_normalizer(const nlohmann::json& j) {
  if (j.is_null()) return nullptr;
  const std::string type = j.value("type", "");
  constexpr int kStable = UTF8PROC_STABLE;
  if (type == "NFC") return std::make_unique<UnicodeForm>(kStable | UTF8PROC_COMPOSE);
  if (type == "NFD") return std::make_unique<UnicodeForm>(kStable | UTF8PROC_DECOMPOSE);
  if (type == "NFKC") return std::make_unique<UnicodeForm>(kStable | UTF8PROC_COMPOSE | UTF8PROC_COMPAT);
  if (type == "NFKD") return std::make_unique<UnicodeForm>(kStable | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT);
  if (type == "Lowercase") return std::make_unique<Lowercase>();
  if (type == "Prepend") return std::make_unique<Prepend>(j.at("prepend").get<std::string>());
  if (type == "Strip") return std::make_unique<Strip>(j.value("strip_left", true), j.value("strip_right", true));
  if (type == "Replace") {
    const auto& pat = j.at("pattern");
    const std::string content = j.at("content").get<std::string>();
    if (pat.contains("String")) return std::make_unique<ReplaceString>(pat.at("String").get<std::string>(), content);
    if (pat.contains("Regex")) return std::make_unique<ReplaceRegex>(pat.at("Regex").get<std::string>(), content);
    throw Error("tokenizer.json: normalizer Replace has a pattern that is neither String nor Regex", "fix the file");
  }
  if (type == "Sequence") {
    std::vector<std::unique_ptr<Normalizer>> parts;
    for (const auto& p : j.at("normalizers"))
      if (auto n = make_normalizer(p)) parts.push_back(std::move(n));
    return std::make_unique<Sequence>(std::move(parts));
  }
  throw Error("tokenizer.json: unsupported normalizer type '" + type + "'",
              "supported: NFC, NFD, NFKC, NFKD, Lowercase, Prepend, Replace, Strip, Sequence");
}

}  // namespace tpshard
