// bpe.h: the BPE model of Hugging Face tokenizers (model.type "BPE"): vocab, rank-ordered merges,
// byte_fallback, unk/fuse_unk, ignore_merges, and a per-thread word -> ids cache.
// Works on one pre-tokenized word at a time; does not own normalization, splitting or added tokens.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

namespace tpshard {

struct BpeOptions {
  /// Words arrive as raw bytes and the vocab is written in the GPT-2 byte alphabet (a ByteLevel
  /// pre-tokenizer is present); initial symbols are single bytes. Otherwise words are UTF-8 text
  /// and initial symbols are characters.
  bool byte_level = false;
  bool byte_fallback = false;  ///< unknown characters become <0xXX> tokens (SentencePiece style)
  bool fuse_unk = false;       ///< consecutive unknown characters give one unk id
  bool ignore_merges = false;  ///< a word that is itself in the vocab is one token (Llama 3)
  std::string unk_token;       ///< empty: unknown characters are dropped (as HF does without unk)
};

/// Per-thread cache of word -> ids for one BpeModel (words up to kMaxCachedWordBytes): open
/// addressing (linear probing, power-of-two table) over two arenas, keyed by XXH3-64 of the word.
class BpeWordCache {
 public:
  explicit BpeWordCache(uint64_t owner) : owner_(owner) { clear(); }
  uint64_t owner() const { return owner_; }
  /// On a hit, append the cached ids to out and return true.
  bool find(std::string_view word, uint64_t hash, std::vector<int32_t>& out) const;
  void insert(std::string_view word, uint64_t hash, const int32_t* ids, size_t n);

 private:
  struct Slot {
    uint64_t hash = 0;  // 0 = empty (stored hashes have their low bit set)
    uint32_t key_off = 0, key_len = 0, ids_off = 0, ids_len = 0;
  };
  void clear();
  void grow();
  uint64_t owner_;
  std::vector<Slot> slots_;
  std::string keys_;
  std::vector<int32_t> ids_;
  size_t count_ = 0;
};

class BpeModel {
 public:
  /// vocab: token string as in the file -> id. merges: (left, right) token strings, rank = index.
  /// Throws Error when a merge names a token missing from the vocab.
  BpeModel(std::unordered_map<std::string, int32_t> vocab,
           const std::vector<std::pair<std::string, std::string>>& merges, BpeOptions opts);

  /// Append the ids of one word (cut first where no merge can cross, see cut_words_). Merging: repeatedly merge the adjacent pair of lowest rank
  /// (leftmost on ties), as HF's BPE::merge_word does (Sennrich et al. 2016 applied by rank).
  /// Short words: direct scan; long words: linked list + binary heap, O(n log n).
  void encode_word(std::string_view word, std::vector<int32_t>& out, BpeWordCache* cache) const;

  /// The calling thread's cache for this model (created on first use; a few models per thread).
  BpeWordCache* thread_cache() const;

  int32_t token_to_id(const std::string& token) const;  ///< -1 when absent
  const std::string* id_to_token(int32_t id) const;     ///< nullptr when absent
  int64_t size() const { return static_cast<int64_t>(id_to_token_.size()); }
  const BpeOptions& options() const { return opts_; }

  static constexpr size_t kMaxCachedWordBytes = 256;

 private:
  struct Merge {
    int32_t rank;
    int32_t new_id;
  };
  const Merge* find_merge(int32_t left, int32_t right) const;
  void initial_symbols(std::string_view word, std::vector<int32_t>& syms) const;
  void merge_small(std::vector<int32_t>& syms) const;
  void merge_heap(std::vector<int32_t>& syms) const;
  void encode_chunk(std::string_view chunk, std::vector<int32_t>& out, BpeWordCache* cache) const;

  BpeOptions opts_;
  std::unordered_map<std::string, int32_t> vocab_;
  std::vector<std::string> id_to_token_;
  /// (left id, right id) -> merge; open addressing, linear probing, power-of-two size, key ~0 = empty.
  struct MergeSlot {
    uint64_t key = ~uint64_t{0};
    Merge merge{0, 0};
  };
  std::vector<MergeSlot> merge_table_;
  uint32_t merge_shift_ = 64;
  void add_merge(uint64_t key, Merge m);
  int32_t byte_ids_[256];            ///< byte_level: id of each single byte; -1 if absent
  int32_t fallback_ids_[256];        ///< byte_fallback: id of <0xXX>; -1 if absent
  std::unordered_map<uint32_t, int32_t> char_ids_;  ///< not byte_level: single-character tokens
  std::unordered_map<std::string, int32_t> raw_vocab_;  ///< byte_level && ignore_merges: raw bytes -> id
  int32_t unk_id_ = -1;
  uint64_t serial_ = 0;
  /// Not byte_level: a word may be cut between adjacent characters a, b when no vocab token
  /// contains "ab": no merge can then cross the cut, so the parts (cached separately) give the
  /// same ids as the whole. Makes Llama 2 style input (no pre-tokenizer: one "word" per segment)
  /// linear and cacheable. Off when a merge involves a <0xXX> token or unknown characters would
  /// fuse into one unk.
  bool cut_words_ = false;
  std::unordered_set<uint64_t> joined_pairs_;  ///< (a << 32 | b) of adjacent chars in vocab tokens
  std::vector<bool> ascii_joined_;             ///< same, for a, b < 128: [a * 128 + b]
  bool joined(uint32_t a, uint32_t b) const;
};

}  // namespace tpshard
