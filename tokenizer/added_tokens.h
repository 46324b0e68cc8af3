// added_tokens.h: tokenizer.json "added_tokens": finding them in text before the model runs, with
// their lstrip / rstrip / single_word flags, leftmost-longest like HF's AddedVocabulary (which
// uses aho-corasick LeftmostLongest). Normalized tokens are matched in normalized text, the others
// in the raw text; the caller (hf_tokenizer.cpp) runs the two passes.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace tpshard {

struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool special = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = false;
  bool single_word = false;
};

/// A span of text: either plain text (id == -1) or one added token (the span includes the
/// whitespace its lstrip/rstrip flags absorbed).
struct TextSegment {
  size_t begin = 0, end = 0;
  int32_t id = -1;
};

class AddedTokenMatcher {
 public:
  /// patterns[k] is the string to look for (the content, or its normalized form) for tokens[k].
  void add(const AddedToken& token, const std::string& pattern);
  bool empty() const { return tokens_.empty(); }
  /// Split text into plain and added-token segments, in order, covering text.
  void split(std::string_view text, std::vector<TextSegment>& out) const;

 private:
  struct Node {
    std::map<unsigned char, int32_t> next;
    int32_t token = -1;  // index into tokens_ when a pattern ends here
  };
  int32_t longest_match_at(std::string_view text, size_t pos, size_t& end) const;

  std::vector<Node> nodes_{Node{}};
  std::vector<AddedToken> tokens_;
  bool first_byte_[256] = {};
};

}  // namespace tpshard
