// added_tokens.cpp: byte trie for added tokens; flag handling as HF AddedVocabulary::find_matches.
#include "tokenizer/added_tokens.h"

#include <algorithm>

#include "tokenizer/utf8.h"

namespace tpshard {
namespace {

// Code point just before byte offset pos (pos > 0), and the offset where it starts.
uint32_t cp_before(std::string_view s, size_t pos, size_t& start) {
  start = pos - 1;
  while (start > 0 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
  size_t i = start;
  return utf8::next_cp(s, i);
}

}  // namespace

void AddedTokenMatcher::add(const AddedToken& token, const std::string& pattern) {
  if (pattern.empty()) return;
  int32_t node = 0;
  for (unsigned char c : pattern) {
    auto it = nodes_[static_cast<size_t>(node)].next.find(c);
    if (it == nodes_[static_cast<size_t>(node)].next.end()) {
      nodes_.push_back(Node{});
      const auto child = static_cast<int32_t>(nodes_.size() - 1);
      nodes_[static_cast<size_t>(node)].next.emplace(c, child);
      node = child;
    } else {
      node = it->second;
    }
  }
  first_byte_[static_cast<unsigned char>(pattern[0])] = true;
  // The first registration of a pattern wins (HF keeps the first token with a given content).
  if (nodes_[static_cast<size_t>(node)].token < 0) {
    tokens_.push_back(token);
    nodes_[static_cast<size_t>(node)].token = static_cast<int32_t>(tokens_.size() - 1);
  }
}

int32_t AddedTokenMatcher::longest_match_at(std::string_view text, size_t pos, size_t& end) const {
  int32_t best = -1;
  int32_t node = 0;
  for (size_t i = pos; i < text.size(); ++i) {
    const auto& next = nodes_[static_cast<size_t>(node)].next;
    const auto it = next.find(static_cast<unsigned char>(text[i]));
    if (it == next.end()) break;
    node = it->second;
    if (nodes_[static_cast<size_t>(node)].token >= 0) {
      best = nodes_[static_cast<size_t>(node)].token;
      end = i + 1;
    }
  }
  return best;
}

void AddedTokenMatcher::split(std::string_view text, std::vector<TextSegment>& out) const {
  out.clear();
  size_t done = 0;  // text before this offset is already in out
  size_t pos = 0;
  while (pos < text.size()) {
    if (!first_byte_[static_cast<unsigned char>(text[pos])]) { ++pos; continue; }
    size_t stop = 0;
    const int32_t k = longest_match_at(text, pos, stop);
    if (k < 0) { ++pos; continue; }
    const AddedToken& tok = tokens_[static_cast<size_t>(k)];
    size_t start = pos;
    pos = stop;  // a rejected match still consumes its text, as aho-corasick find_iter does
    if (tok.single_word) {
      size_t cs = 0;
      const bool word_before = start > 0 && utf8::is_word_char(cp_before(text, start, cs));
      size_t i = stop;
      const bool word_after = stop < text.size() && utf8::is_word_char(utf8::next_cp(text, i));
      if (word_before || word_after) continue;
    }
    if (start < done) continue;  // overlaps whitespace a previous rstrip absorbed
    if (tok.lstrip) {
      while (start > done) {
        size_t cs = 0;
        if (!utf8::is_whitespace(cp_before(text, start, cs))) break;
        start = cs;
      }
    }
    if (tok.rstrip) {
      while (stop < text.size()) {
        size_t i = stop;
        if (!utf8::is_whitespace(utf8::next_cp(text, i))) break;
        stop = i;
      }
      pos = stop;
    }
    if (start > done) out.push_back({done, start, -1});
    out.push_back({start, stop, tok.id});
    done = stop;
  }
  if (done < text.size()) out.push_back({done, text.size(), -1});
}

}  // namespace tpshard
