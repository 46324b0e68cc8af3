// bpe.cpp: BPE merging by rank (HF tokenizers models/bpe semantics), byte fallback and the cache.
#include "tokenizer/bpe.h"

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstring>
#include <cstdio>
#include <queue>

#include <xxhash.h>

#include "format/error.h"
#include "tokenizer/utf8.h"

namespace tpshard {
namespace {

uint64_t pair_key(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

// Decode a token written in the GPT-2 byte alphabet to raw bytes; false if a character is outside it.
bool byte_level_to_raw(const std::string& tok, std::string& raw) {
  raw.clear();
  size_t i = 0;
  while (i < tok.size()) {
    const int b = utf8::cp_to_byte(utf8::next_cp(tok, i));
    if (b < 0) return false;
    raw += static_cast<char>(b);
  }
  return true;
}

std::atomic<uint64_t> g_next_serial{1};
constexpr size_t kSmallWord = 24;         // below this many symbols, scan instead of a heap
constexpr size_t kMaxCacheEntries = 1 << 18;
constexpr size_t kCachesPerThread = 4;

}  // namespace

BpeModel::BpeModel(std::unordered_map<std::string, int32_t> vocab,
                   const std::vector<std::pair<std::string, std::string>>& merges, BpeOptions opts)
    : opts_(std::move(opts)), vocab_(std::move(vocab)), serial_(g_next_serial++) {
  int32_t max_id = -1;
  for (const auto& [tok, id] : vocab_) {
    if (id < 0) throw Error("tokenizer.json: model.vocab has a negative id for token '" + tok + "'", "fix the file");
    max_id = std::max(max_id, id);
  }
  id_to_token_.assign(static_cast<size_t>(max_id + 1), std::string());
  for (const auto& [tok, id] : vocab_) id_to_token_[static_cast<size_t>(id)] = tok;

  size_t table_size = 16;
  merge_shift_ = 60;
  while (table_size < merges.size() * 2) { table_size *= 2; --merge_shift_; }
  merge_table_.assign(table_size, MergeSlot{});
  for (size_t r = 0; r < merges.size(); ++r) {
    const auto& [a, b] = merges[r];
    const auto ia = vocab_.find(a), ib = vocab_.find(b), ic = vocab_.find(a + b);
    if (ia == vocab_.end() || ib == vocab_.end() || ic == vocab_.end())
      throw Error("tokenizer.json: merge " + std::to_string(r) + " ('" + a + "' '" + b +
                      "') uses a token that is not in model.vocab",
                  "the file is corrupt or truncated; re-download tokenizer.json");
    // emplace keeps the first (lowest) rank if a pair repeats, as HF does.
    add_merge(pair_key(ia->second, ib->second), Merge{static_cast<int32_t>(r), ic->second});
  }

  std::fill(std::begin(byte_ids_), std::end(byte_ids_), -1);
  std::fill(std::begin(fallback_ids_), std::end(fallback_ids_), -1);
  if (opts_.byte_level) {
    std::string raw;
    for (const auto& [tok, id] : vocab_) {
      if (!byte_level_to_raw(tok, raw)) continue;
      if (raw.size() == 1) byte_ids_[static_cast<unsigned char>(raw[0])] = id;
      if (opts_.ignore_merges) raw_vocab_.emplace(raw, id);
    }
  } else {
    for (const auto& [tok, id] : vocab_) {
      size_t i = 0;
      if (tok.empty() || !utf8::is_valid(tok)) continue;
      const uint32_t cp = utf8::next_cp(tok, i);
      if (i == tok.size()) char_ids_.emplace(cp, id);
    }
  }
  if (opts_.byte_fallback) {
    char name[8];
    for (int b = 0; b < 256; ++b) {
      std::snprintf(name, sizeof(name), "<0x%02X>", b);
      const auto it = vocab_.find(name);
      if (it != vocab_.end()) fallback_ids_[b] = it->second;
    }
  }
  if (!opts_.unk_token.empty()) {
    const auto it = vocab_.find(opts_.unk_token);
    if (it == vocab_.end())
      throw Error("tokenizer.json: model.unk_token '" + opts_.unk_token + "' is not in model.vocab", "fix the file");
    unk_id_ = it->second;
  }
  if (!opts_.byte_level) {
    bool ok = !(opts_.fuse_unk && unk_id_ >= 0 && !opts_.byte_fallback);
    if (opts_.byte_fallback)
      for (int b = 0; b < 256; ++b) ok = ok && fallback_ids_[b] >= 0;
    if (ok && opts_.byte_fallback) {
      std::unordered_set<int32_t> fallback(std::begin(fallback_ids_), std::end(fallback_ids_));
      for (const auto& slot : merge_table_) {
        if (slot.key == ~uint64_t{0}) continue;
        const auto left = static_cast<int32_t>(slot.key >> 32), right = static_cast<int32_t>(slot.key & 0xFFFFFFFFu);
        if (fallback.count(left) || fallback.count(right)) { ok = false; break; }
      }
    }
    cut_words_ = ok;
    if (ok) {
      ascii_joined_.assign(128 * 128, false);
      for (const auto& [tok, id] : vocab_) {
        if (!utf8::is_valid(tok)) continue;
        size_t i = 0;
        uint32_t prev = utf8::next_cp(tok, i);
        while (i < tok.size()) {
          const uint32_t cur = utf8::next_cp(tok, i);
          if (prev < 128 && cur < 128) ascii_joined_[prev * 128 + cur] = true;
          else joined_pairs_.insert((static_cast<uint64_t>(prev) << 32) | cur);
          prev = cur;
        }
      }
    }
  }
}

int32_t BpeModel::token_to_id(const std::string& token) const {
  const auto it = vocab_.find(token);
  return it == vocab_.end() ? -1 : it->second;
}

const std::string* BpeModel::id_to_token(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= id_to_token_.size()) return nullptr;
  const std::string& t = id_to_token_[static_cast<size_t>(id)];
  // Holes in the id range (ids used only by added tokens) have no vocab entry.
  if (t.empty()) return nullptr;
  return &t;
}

void BpeModel::add_merge(uint64_t key, Merge m) {
  const size_t mask = merge_table_.size() - 1;
  for (size_t i = (key * 0x9E3779B97F4A7C15ull) >> merge_shift_;; i = (i + 1) & mask) {
    if (merge_table_[i].key == key) return;  // a repeated pair keeps its first (lowest) rank, as HF does
    if (merge_table_[i].key == ~uint64_t{0}) {
      merge_table_[i] = MergeSlot{key, m};
      return;
    }
  }
}

const BpeModel::Merge* BpeModel::find_merge(int32_t left, int32_t right) const {
  const uint64_t key = pair_key(left, right);
  const size_t mask = merge_table_.size() - 1;
  for (size_t i = (key * 0x9E3779B97F4A7C15ull) >> merge_shift_;; i = (i + 1) & mask) {
    const MergeSlot& s = merge_table_[i];
    if (s.key == key) return &s.merge;
    if (s.key == ~uint64_t{0}) return nullptr;
  }
}

void BpeModel::initial_symbols(std::string_view word, std::vector<int32_t>& syms) const {
  syms.clear();
  if (opts_.byte_level) {
    for (unsigned char b : word) {
      const int32_t id = byte_ids_[b];
      if (id >= 0) syms.push_back(id);
      else if (unk_id_ >= 0 && !(opts_.fuse_unk && !syms.empty() && syms.back() == unk_id_)) syms.push_back(unk_id_);
    }
    return;
  }
  bool pending_unk = false;
  size_t i = 0;
  while (i < word.size()) {
    const size_t start = i;
    const uint32_t cp = utf8::next_cp(word, i);
    const auto it = char_ids_.find(cp);
    if (it != char_ids_.end()) {
      if (pending_unk) { syms.push_back(unk_id_); pending_unk = false; }
      syms.push_back(it->second);
      continue;
    }
    if (opts_.byte_fallback) {
      bool all = true;
      for (size_t k = start; k < i; ++k) all = all && fallback_ids_[static_cast<unsigned char>(word[k])] >= 0;
      if (all) {
        if (pending_unk) { syms.push_back(unk_id_); pending_unk = false; }
        for (size_t k = start; k < i; ++k) syms.push_back(fallback_ids_[static_cast<unsigned char>(word[k])]);
        continue;
      }
    }
    if (unk_id_ < 0) continue;  // no unk token: the character is dropped (HF behaviour)
    if (opts_.fuse_unk) {
      pending_unk = true;
    } else {
      syms.push_back(unk_id_);
    }
  }
  if (pending_unk) syms.push_back(unk_id_);
}

void BpeModel::merge_small(std::vector<int32_t>& syms) const {
  // rank[i]: rank of the pair (syms[i], syms[i+1]), INT32_MAX when they do not merge. Only the
  // two pairs next to a merge change, so each step costs O(n) compares and two lookups.
  int32_t rank[kSmallWord], new_id[kSmallWord];
  size_t n = syms.size();
  auto fill = [&](size_t i) {
    const Merge* m = find_merge(syms[i], syms[i + 1]);
    rank[i] = m ? m->rank : INT32_MAX;
    new_id[i] = m ? m->new_id : -1;
  };
  for (size_t i = 0; i + 1 < n; ++i) fill(i);
  while (n > 1) {
    size_t best = 0;
    for (size_t i = 1; i + 1 < n; ++i)
      if (rank[i] < rank[best]) best = i;
    if (rank[best] == INT32_MAX) break;
    syms[best] = new_id[best];
    for (size_t i = best + 1; i + 1 < n; ++i) {
      syms[i] = syms[i + 1];
      rank[i] = rank[i + 1];
      new_id[i] = new_id[i + 1];
    }
    --n;
    if (best + 1 < n) fill(best);
    if (best > 0) fill(best - 1);
  }
  syms.resize(n);
}

void BpeModel::merge_heap(std::vector<int32_t>& syms) const {
  const int32_t n = static_cast<int32_t>(syms.size());
  std::vector<int32_t> prev(static_cast<size_t>(n)), next(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) { prev[static_cast<size_t>(i)] = i - 1; next[static_cast<size_t>(i)] = i + 1 < n ? i + 1 : -1; }
  struct Cand {
    int32_t rank, pos, left, right;
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> heap;
  auto push = [&](int32_t pos) {
    if (pos < 0) return;  // the first symbol has no left neighbour (prev == -1)
    const int32_t nx = next[static_cast<size_t>(pos)];
    if (nx < 0) return;
    if (const Merge* m = find_merge(syms[static_cast<size_t>(pos)], syms[static_cast<size_t>(nx)]))
      heap.push(Cand{m->rank, pos, syms[static_cast<size_t>(pos)], syms[static_cast<size_t>(nx)]});
  };
  for (int32_t i = 0; i + 1 < n; ++i) push(i);
  while (!heap.empty()) {
    const Cand c = heap.top();
    heap.pop();
    const auto p = static_cast<size_t>(c.pos);
    const int32_t nx = next[p];
    // Stale entry: the left symbol was merged away, or either side changed since it was pushed.
    if (syms[p] != c.left || nx < 0 || syms[static_cast<size_t>(nx)] != c.right) continue;
    syms[p] = find_merge(c.left, c.right)->new_id;
    const int32_t nn = next[static_cast<size_t>(nx)];
    next[p] = nn;
    if (nn >= 0) prev[static_cast<size_t>(nn)] = c.pos;
    syms[static_cast<size_t>(nx)] = -1;
    push(prev[p]);
    push(c.pos);
  }
  size_t w = 0;
  for (int32_t i = 0; i >= 0 && i < n; i = next[static_cast<size_t>(i)]) syms[w++] = syms[static_cast<size_t>(i)];
  syms.resize(w);
}

void BpeModel::encode_chunk(std::string_view word, std::vector<int32_t>& out, BpeWordCache* cache) const {
  const bool cacheable = cache && word.size() <= kMaxCachedWordBytes;
  uint64_t hash = 0;
  if (cacheable) {
    hash = XXH3_64bits(word.data(), word.size()) | 1;
    if (cache->find(word, hash, out)) return;
  }
  thread_local std::vector<int32_t> syms;
  syms.clear();
  bool done = false;
  if (opts_.ignore_merges) {
    const auto& map = opts_.byte_level ? raw_vocab_ : vocab_;
    const auto it = map.find(std::string(word));
    if (it != map.end()) { syms.push_back(it->second); done = true; }
  }
  if (!done) {
    initial_symbols(word, syms);
    if (syms.size() < kSmallWord) merge_small(syms);
    else merge_heap(syms);
  }
  out.insert(out.end(), syms.begin(), syms.end());
  if (cacheable) cache->insert(word, hash, syms.data(), syms.size());
}

bool BpeModel::joined(uint32_t a, uint32_t b) const {
  if (a < 128 && b < 128) return ascii_joined_[a * 128 + b];
  return joined_pairs_.count((static_cast<uint64_t>(a) << 32) | b) > 0;
}

void BpeModel::encode_word(std::string_view word, std::vector<int32_t>& out, BpeWordCache* cache) const {
  if (word.empty()) return;
  if (!cut_words_) {
    encode_chunk(word, out, cache);
    return;
  }
  size_t begin = 0, i = 0;
  uint32_t prev = utf8::next_cp(word, i);
  while (i < word.size()) {
    const size_t at = i;
    const uint32_t cur = utf8::next_cp(word, i);
    if (!joined(prev, cur)) {
      encode_chunk(word.substr(begin, at - begin), out, cache);
      begin = at;
    }
    prev = cur;
  }
  encode_chunk(word.substr(begin), out, cache);
}

BpeWordCache* BpeModel::thread_cache() const {
  // Keyed by a never-reused serial, so a cache cannot outlive its model's identity.
  thread_local std::vector<std::unique_ptr<BpeWordCache>> caches;
  for (auto& c : caches)
    if (c->owner() == serial_) return c.get();
  if (caches.size() >= kCachesPerThread) caches.erase(caches.begin());
  caches.push_back(std::make_unique<BpeWordCache>(serial_));
  return caches.back().get();
}

bool BpeWordCache::find(std::string_view word, uint64_t hash, std::vector<int32_t>& out) const {
  const size_t mask = slots_.size() - 1;
  for (size_t i = hash & mask;; i = (i + 1) & mask) {
    const Slot& s = slots_[i];
    if (s.hash == 0) return false;
    if (s.hash == hash && s.key_len == word.size() && std::memcmp(keys_.data() + s.key_off, word.data(), word.size()) == 0) {
      out.insert(out.end(), ids_.begin() + s.ids_off, ids_.begin() + s.ids_off + s.ids_len);
      return true;
    }
  }
}

void BpeWordCache::insert(std::string_view word, uint64_t hash, const int32_t* ids, size_t n) {
  if (count_ >= kMaxCacheEntries || keys_.size() + word.size() > UINT32_MAX / 2) clear();
  if ((count_ + 1) * 2 > slots_.size()) grow();
  const size_t mask = slots_.size() - 1;
  size_t i = hash & mask;
  while (slots_[i].hash != 0) i = (i + 1) & mask;
  Slot& s = slots_[i];
  s.hash = hash;
  s.key_off = static_cast<uint32_t>(keys_.size());
  s.key_len = static_cast<uint32_t>(word.size());
  s.ids_off = static_cast<uint32_t>(ids_.size());
  s.ids_len = static_cast<uint32_t>(n);
  keys_.append(word.data(), word.size());
  ids_.insert(ids_.end(), ids, ids + n);
  ++count_;
}

void BpeWordCache::clear() {
  slots_.assign(1024, Slot{});
  keys_.clear();
  ids_.clear();
  count_ = 0;
}

void BpeWordCache::grow() {
  std::vector<Slot> old(slots_.size() * 2);
  old.swap(slots_);
  const size_t mask = slots_.size() - 1;
  for (const Slot& s : old) {
    if (s.hash == 0) continue;
    size_t i = s.hash & mask;
    while (slots_[i].hash != 0) i = (i + 1) & mask;
    slots_[i] = s;
  }
}

}  // namespace tpshard
