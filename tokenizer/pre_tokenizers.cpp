// pre_tokenizers.cpp: tokenizer.json pre-tokenizers (HF tokenizers src/pre_tokenizers semantics,
// including SplitDelimiterBehavior of src/tokenizer/normalizer.rs).
#include "tokenizer/pre_tokenizers.h"

#include <algorithm>
#include <utility>

#include <nlohmann/json.hpp>

#include "format/error.h"
#include "tokenizer/regex.h"
#include "tokenizer/utf8.h"

namespace tpshard {

const char* const kGpt2SplitPattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

namespace {

enum class Behavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

Behavior parse_behavior(const std::string& s) {
  if (s == "Removed") return Behavior::Removed;
  if (s == "Isolated") return Behavior::Isolated;
  if (s == "MergedWithPrevious") return Behavior::MergedWithPrevious;
  if (s == "MergedWithNext") return Behavior::MergedWithNext;
  if (s == "Contiguous") return Behavior::Contiguous;
  throw Error("tokenizer.json: unsupported Split behavior '" + s + "'",
              "supported: Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous");
}

struct Span {
  size_t b, e;
  bool is_match;
};

// Matches (relative to piece) -> alternating (gap, match) spans covering the piece, then the
// behaviour; resulting non-empty spans, offset by base, are appended to out.
void apply_behavior(size_t base, size_t len, const std::vector<std::pair<size_t, size_t>>& matches, Behavior behavior,
                    bool invert, std::vector<std::pair<size_t, size_t>>& out) {
  thread_local std::vector<Span> spans;
  thread_local std::vector<std::pair<size_t, size_t>> res;
  spans.clear();
  res.clear();
  size_t pos = 0;
  for (const auto& [b, e] : matches) {
    if (b > pos) spans.push_back({pos, b, invert});
    spans.push_back({b, e, !invert});
    pos = e;
  }
  if (pos < len) spans.push_back({pos, len, invert});

  switch (behavior) {
    case Behavior::Isolated:
      for (const auto& sp : spans) res.emplace_back(sp.b, sp.e);
      break;
    case Behavior::Removed:
      for (const auto& sp : spans)
        if (!sp.is_match) res.emplace_back(sp.b, sp.e);
      break;
    case Behavior::MergedWithPrevious: {
      bool prev_match = false;
      for (const auto& sp : spans) {
        if (sp.is_match && !prev_match && !res.empty()) res.back().second = sp.e;
        else res.emplace_back(sp.b, sp.e);
        prev_match = sp.is_match;
      }
      break;
    }
    case Behavior::MergedWithNext: {
      bool prev_match = false;
      for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
        if (it->is_match && !prev_match && !res.empty()) res.back().first = it->b;
        else res.emplace_back(it->b, it->e);
        prev_match = it->is_match;
      }
      std::reverse(res.begin(), res.end());
      break;
    }
    case Behavior::Contiguous: {
      bool prev_match = false;
      for (const auto& sp : spans) {
        if (sp.is_match == prev_match && !res.empty()) res.back().second = sp.e;
        else res.emplace_back(sp.b, sp.e);
        prev_match = sp.is_match;
      }
      break;
    }
  }
  for (const auto& [b, e] : res)
    if (e > b) out.emplace_back(base + b, base + e);
}

// Each character for which pred holds is one match.
void char_matches(std::string_view s, bool (*pred)(uint32_t), std::vector<std::pair<size_t, size_t>>& m) {
  m.clear();
  size_t i = 0;
  while (i < s.size()) {
    const size_t b = i;
    if (pred(utf8::next_cp(s, i))) m.emplace_back(b, i);
  }
}

// Prepend `prefix` to every piece for which want(k, piece) holds, rebuilding the buffer.
template <typename Want>
void prepend_where(Pieces& p, const std::string& prefix, Want want) {
  bool any = false;
  for (size_t k = 0; k < p.spans.size() && !any; ++k) any = want(k, p.piece(k));
  if (!any) return;
  std::string buf;
  buf.reserve(p.buf.size() + prefix.size() * p.spans.size());
  for (size_t k = 0; k < p.spans.size(); ++k) {
    const std::string_view piece = p.piece(k);
    const size_t b = buf.size();
    if (want(k, piece)) buf += prefix;
    buf.append(piece.data(), piece.size());
    p.spans[k] = {b, buf.size()};
  }
  p.buf.swap(buf);
}

class ByteLevel : public PreTokenizer {
 public:
  ByteLevel(bool add_prefix_space, bool use_regex)
      : add_prefix_space_(add_prefix_space), re_(use_regex ? std::make_unique<Regex>(kGpt2SplitPattern, "pre_tokenizer ByteLevel") : nullptr) {}
  void split(Pieces& p, bool) const override {
    if (add_prefix_space_)
      prepend_where(p, " ", [](size_t, std::string_view piece) { return piece.empty() || piece[0] != ' '; });
    if (!re_) return;
    thread_local std::vector<std::pair<size_t, size_t>> m;
    thread_local std::vector<std::pair<size_t, size_t>> out;
    out.clear();
    for (const auto& [b, e] : p.spans) {
      re_->find_all(std::string_view(p.buf).substr(b, e - b), m);
      apply_behavior(b, e - b, m, Behavior::Isolated, false, out);
    }
    p.spans.swap(out);
  }
  bool is_byte_level() const override { return true; }

 private:
  bool add_prefix_space_;
  std::unique_ptr<Regex> re_;
};

class Split : public PreTokenizer {
 public:
  Split(const std::string& pattern, Behavior b, bool invert) : re_(pattern, "pre_tokenizer Split"), behavior_(b), invert_(invert) {}
  void split(Pieces& p, bool) const override {
    thread_local std::vector<std::pair<size_t, size_t>> m;
    thread_local std::vector<std::pair<size_t, size_t>> out;
    out.clear();
    for (const auto& [b, e] : p.spans) {
      re_.find_all(std::string_view(p.buf).substr(b, e - b), m);
      apply_behavior(b, e - b, m, behavior_, invert_, out);
    }
    p.spans.swap(out);
  }

 private:
  Regex re_;
  Behavior behavior_;
  bool invert_;
};

class CharSplit : public PreTokenizer {
 public:
  CharSplit(bool (*pred)(uint32_t), Behavior b) : pred_(pred), behavior_(b) {}
  void split(Pieces& p, bool) const override {
    thread_local std::vector<std::pair<size_t, size_t>> m;
    thread_local std::vector<std::pair<size_t, size_t>> out;
    out.clear();
    for (const auto& [b, e] : p.spans) {
      char_matches(std::string_view(p.buf).substr(b, e - b), pred_, m);
      apply_behavior(b, e - b, m, behavior_, false, out);
    }
    p.spans.swap(out);
  }

 private:
  bool (*pred_)(uint32_t);
  Behavior behavior_;
};

class Metaspace : public PreTokenizer {
 public:
  enum class Prepend { Always, First, Never };
  Metaspace(std::string replacement, Prepend scheme, bool split)
      : rep_(std::move(replacement)), scheme_(scheme), split_(split) {
    TPS_CHECK(!rep_.empty(), "Metaspace: empty replacement", "this is a bug in the caller (metaspace_replacement checks it)");
  }
  void split(Pieces& p, bool at_start) const override {
    // Rewrite: spaces -> replacement, then the prefix where the scheme asks for it.
    std::string buf;
    buf.reserve(p.buf.size() + p.buf.size() / 4);
    for (size_t k = 0; k < p.spans.size(); ++k) {
      const std::string_view piece = p.piece(k);
      const size_t b = buf.size();
      const bool starts_with_rep = piece.substr(0, 1) == " " || piece.substr(0, rep_.size()) == rep_;
      const bool prepend = scheme_ == Prepend::Always || (scheme_ == Prepend::First && at_start && k == 0);
      if (prepend && !starts_with_rep) buf += rep_;
      for (char c : piece) {
        if (c == ' ') buf += rep_;
        else buf += c;
      }
      p.spans[k] = {b, buf.size()};
    }
    p.buf.swap(buf);
    if (!split_) return;
    std::vector<std::pair<size_t, size_t>> m, out;
    for (const auto& [b, e] : p.spans) {
      const std::string_view s = std::string_view(p.buf).substr(b, e - b);
      m.clear();
      for (size_t pos = s.find(rep_); pos != std::string_view::npos; pos = s.find(rep_, pos + rep_.size()))
        m.emplace_back(pos, pos + rep_.size());
      apply_behavior(b, e - b, m, Behavior::MergedWithNext, false, out);
    }
    p.spans.swap(out);
  }

 private:
  std::string rep_;
  Prepend scheme_;
  bool split_;
};

class Sequence : public PreTokenizer {
 public:
  explicit Sequence(std::vector<std::unique_ptr<PreTokenizer>> parts) : parts_(std::move(parts)) {}
  void split(Pieces& p, bool at_start) const override {
    for (const auto& part : parts_) part->split(p, at_start);
  }
  bool is_byte_level() const override {
    for (const auto& p : parts_)
      if (p->is_byte_level()) return true;
    return false;
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> parts_;
};

std::string pattern_of(const nlohmann::json& pat, const char* where) {
  if (pat.contains("Regex")) return pat.at("Regex").get<std::string>();
  if (pat.contains("String")) return Regex::escape(pat.at("String").get<std::string>());
  throw Error(std::string("tokenizer.json: ") + where + " pattern is neither String nor Regex", "fix the file");
}

}  // namespace

std::string metaspace_replacement(const nlohmann::json& j, const char* what) {
  std::string rep = "\u2581";
  if (j.contains("replacement")) {
    const nlohmann::json& r = j.at("replacement");
    rep = r.is_string() ? r.get<std::string>() : std::string();
    if (!r.is_string() || rep.empty() || utf8::valid_seq_len(rep, 0) != rep.size())
      throw Error(std::string("tokenizer.json: ") + what + " Metaspace replacement " + r.dump() + " is not one character",
                  "the file is corrupt; Metaspace needs one character, normally \"\u2581\"");
  }
  return rep;
}

std::unique_ptr<PreTokenizer> make_pre_tokenizer(const nlohmann::json& j) {
  if (j.is_null()) return nullptr;
  const std::string type = j.value("type", "");
  if (type == "ByteLevel") return std::make_unique<ByteLevel>(j.value("add_prefix_space", true), j.value("use_regex", true));
  if (type == "Split")
    return std::make_unique<Split>(pattern_of(j.at("pattern"), "pre_tokenizer Split"),
                                   parse_behavior(j.at("behavior").get<std::string>()), j.value("invert", false));
  if (type == "Digits")
    return std::make_unique<CharSplit>(utf8::is_numeric, j.value("individual_digits", false) ? Behavior::Isolated : Behavior::Contiguous);
  if (type == "WhitespaceSplit") return std::make_unique<CharSplit>(utf8::is_whitespace, Behavior::Removed);
  if (type == "Whitespace") return std::make_unique<Split>(R"(\w+|[^\w\s]+)", Behavior::Removed, true);
  if (type == "Metaspace") {
    Metaspace::Prepend scheme = j.value("add_prefix_space", true) ? Metaspace::Prepend::Always : Metaspace::Prepend::Never;
    if (j.contains("prepend_scheme")) {
      const std::string s = j.at("prepend_scheme").get<std::string>();
      if (s == "always") scheme = Metaspace::Prepend::Always;
      else if (s == "first") scheme = Metaspace::Prepend::First;
      else if (s == "never") scheme = Metaspace::Prepend::Never;
      else throw Error("tokenizer.json: Metaspace prepend_scheme '" + s + "' is unknown", "use always, first or never");
    }
    return std::make_unique<Metaspace>(metaspace_replacement(j, "pre_tokenizer"), scheme, j.value("split", true));
  }
  if (type == "Sequence") {
    std::vector<std::unique_ptr<PreTokenizer>> parts;
    for (const auto& p : j.at("pretokenizers"))
      if (auto t = make_pre_tokenizer(p)) parts.push_back(std::move(t));
    return std::make_unique<Sequence>(std::move(parts));
  }
  throw Error("tokenizer.json: unsupported pre_tokenizer type '" + type + "'",
              "supported: ByteLevel, Split, Digits, Metaspace, Whitespace, WhitespaceSplit, Sequence");
}

}  // namespace tpshard
