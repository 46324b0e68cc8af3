// generate.cpp: continuous batching over kv_cache slots. Each loop iteration runs one forward: the
// prompts of the requests just admitted into free slots (pieces of at most kMaxPrefillTokens) together
// with the next token of every request already decoding, or, when no prompt is pending, one decode step
// for every active request; a finished request frees its slot for the next waiting one. Requests whose prompts start with the same tokens (few-shot examples, a system prompt)
// are grouped: the common prefix is prefilled once into a slot of its own, which every member reads
// (SeqChunk::prefix_slot) and only the members' suffixes are prefilled. Requests added later (a server adds
// each on its own) join a prefix still in use when their prompt starts with at least kMinSharedPrefix of
// its tokens, reading that many of its positions, and form new groups with the requests still waiting.
// Every decision depends only on the logits (identical on all ranks) and on counters, so
// all ranks stay in lockstep and results do not depend on how requests were batched.
#include "runtime/generate.h"

#include <algorithm>
#include <chrono>
#include <numeric>
#include <deque>
#include <memory>
#include <set>

#include "format/error.h"
#include "format/hash.h"
#include "runtime/sampling.h"
#include "runtime/stop_strings.h"
#include "runtime/tuning.h"

namespace tpshard {

void check_request(const GenerationRequest& r, int64_t max_seq, const std::string& who, int64_t model_limit,
                   const TokenCountNames& names) {
  const int64_t p = static_cast<int64_t>(r.prompt_ids.size());
  const std::string max_name = names.max_new_tokens, min_name = names.min_new_tokens;
  // At the model's own limit, raising --max-seq-len is no way out: say so instead of hinting it.
  const bool at_model_limit = model_limit > 0 && max_seq >= model_limit;
  const std::string limit_text = at_model_limit ? "the model's context of " + std::to_string(max_seq) + " positions"
                                                : "--max-seq-len " + std::to_string(max_seq);
  TPS_CHECK(p > 0, who + ": empty prompt", "give at least one token (BOS for an empty prompt)");
  TPS_CHECK(p <= max_seq, who + ": prompt of " + std::to_string(p) + " tokens exceeds " + limit_text,
            at_model_limit ? std::string("shorten the prompt")
                           : "shorten the prompt, or raise --max-seq-len if it is below the model's max_position_embeddings");
  TPS_CHECK(r.params.max_new_tokens >= 0 && r.params.min_new_tokens >= 0,
            who + ": " + max_name + " and " + min_name + " must be >= 0", "fix the sampling options");
  TPS_CHECK(r.params.min_new_tokens <= r.params.max_new_tokens,
            who + ": " + min_name + " " + std::to_string(r.params.min_new_tokens) + " is greater than " + max_name + " " +
                std::to_string(r.params.max_new_tokens),
            "use " + min_name + " 0.." + std::to_string(r.params.max_new_tokens) + ", or raise " + max_name);
  // The last generated token is never fed back, so p + max_new_tokens - 1 positions are needed.
  const std::string lower =
      "lower " + max_name + " to " + std::to_string(std::max<int64_t>(0, max_seq - p + 1)) + " or less";
  TPS_CHECK(p + r.params.max_new_tokens - 1 <= max_seq,
            who + ": prompt of " + std::to_string(p) + " tokens + " + max_name + " " +
                std::to_string(r.params.max_new_tokens) + " exceeds " + limit_text,
            at_model_limit ? "shorten the prompt, or " + lower
                           : lower + ", or raise --max-seq-len if it is below the model's max_position_embeddings");
  const SamplingParams& sp = r.params;
  TPS_CHECK(sp.temperature >= 0.0f, who + ": temperature " + std::to_string(sp.temperature) + " is negative",
            "use temperature 0 (greedy) or a positive value");
  TPS_CHECK(sp.top_k >= 0, who + ": top_k " + std::to_string(sp.top_k) + " is negative", "use top_k 0 (off) or more");
  TPS_CHECK(sp.top_p > 0.0f && sp.top_p <= 1.0f, who + ": top_p " + std::to_string(sp.top_p) + " is outside (0, 1]",
            "use top_p in (0, 1]; 1 turns it off");
  TPS_CHECK(sp.min_p >= 0.0f && sp.min_p <= 1.0f, who + ": min_p " + std::to_string(sp.min_p) + " is outside [0, 1]",
            "use min_p in [0, 1]; 0 turns it off");
  TPS_CHECK(sp.repetition_penalty > 0.0f,
            who + ": repetition_penalty " + std::to_string(sp.repetition_penalty) + " is not positive",
            "use a repetition_penalty > 0; 1 turns it off");
}

namespace {

/// Prompt tokens fed per forward at most (longer prompts are prefilled in pieces).
constexpr int64_t kMaxPrefillTokens = 2048;

/// Fewest common prompt tokens worth a kv_cache slot of their own (shorter prefixes are prefilled per request).
constexpr size_t kMinSharedPrefix = 16;

using Clock = std::chrono::steady_clock;

/// The RNG stream of a request: keyed by its id when it has one, so a resumed or re-batched job draws
/// the same samples for the same request; by its index otherwise.
uint64_t rng_stream(const GenerationRequest& r, size_t index) {
  return r.id.empty() ? index : xxh3_64(r.id.data(), r.id.size());
}

/// A prompt prefix common to several requests, prefilled once into its own kv_cache slot.
struct SharedPrefix {
  size_t length = 0;        ///< tokens (the first `length` of each member's prompt)
  std::vector<int32_t> tokens;  ///< those tokens (a copy: any member may finish, and be taken, first)
  int members_left = 0;     ///< members not finished yet; the slot is freed when none is left
  int slot = -1;            ///< kv_cache slot while in use, -1 before and after
  size_t prefilled = 0;     ///< tokens already in that slot
};

/// Per-request records addressed by the request's index (0, 1, ... in add() order) whose oldest entries
/// can be dropped: a server takes results for days, and the records of taken requests must not pile up.
template <typename T>
class IndexedRecords {
 public:
  T& operator[](size_t i) { return items_[i - first_]; }
  const T& operator[](size_t i) const { return items_[i - first_]; }
  size_t size() const { return first_ + items_.size(); }  ///< one past the newest index
  size_t first() const { return first_; }                   ///< the oldest index still held
  bool holds(size_t i) const { return i >= first_ && i < size(); }
  void push_back(T v) { items_.push_back(std::move(v)); }
  void resize(size_t end, const T& v = T()) { items_.resize(end - first_, v); }  ///< end: one past the newest index
  void pop_front() {
    items_.pop_front();
    ++first_;
  }

 private:
  std::deque<T> items_;
  size_t first_ = 0;
};

struct Active {
  size_t req = 0;           ///< index into requests
  int slot = 0;
  int prefix = -1;          ///< index into prefixes_, -1: none
  size_t prefix_len = 0;    ///< positions of the prefix's slot it reads (<= the prefix's length)
  size_t prefilled = 0;     ///< prompt tokens already in the kv_cache
  std::vector<int32_t> output;
  std::unique_ptr<StreamDecoder> decoder;
  std::string text;         ///< decoded output so far
  std::vector<size_t> token_end;  ///< per output id: text.size() once its text was added
  size_t streamed = 0;      ///< bytes of text given to on_text
};

}  // namespace

class BatchGenerator::Impl {
 public:
  Impl(ModelRunner& runner, const Tokenizer& tok, GenerateCallbacks cb)
      : runner_(runner), tok_(tok), cb_(std::move(cb)), vocab_(runner.config().vocab_size) {
    TPS_CHECK(runner_.max_batch() >= 1, "generate: the runner has no kv_cache slots", "pass --max-batch 1 or more");
    for (int64_t id : runner.config().eos_token_ids) eos_.insert(static_cast<int32_t>(id));
    for (int32_t id : tok.eos_ids()) eos_.insert(id);
    for (int s = runner_.max_batch() - 1; s >= 0; --s) free_slots_.push_back(s);
  }

  size_t add(std::vector<GenerationRequest> requests);
  bool busy() const { return !waiting_.empty() || !active_.empty(); }
  void step();
  GenerationResult take_result(size_t index) {
    TPS_CHECK(results_.holds(index) && !results_[index].finish_reason.empty() && results_[index].finish_reason != "taken",
              "generate: result " + std::to_string(index) + " is not finished or was taken", "this is a bug in the caller");
    GenerationResult r = std::move(results_[index]);
    results_[index] = GenerationResult{};
    results_[index].finish_reason = "taken";
    requests_[index] = GenerationRequest{};  // the prompt is no longer needed
    if (!in_step_) drop_taken();  // during a step, an Active may still name it: step() drops at its end
    return r;
  }
  /// Records of requests held (the oldest not taken, and every one after it); for tests.
  size_t records_held() const { return requests_.size() - requests_.first(); }
  bool cancel(size_t index);
  int slots_in_use() const { return runner_.max_batch() - static_cast<int>(free_slots_.size()); }
  size_t running() const { return active_.size(); }
  void set_max_running(size_t n) { max_running_ = n; }
  size_t waiting() const { return waiting_.size(); }
  const GenerationStats& stats() const { return stats_; }

 private:
  /// Groups requests [first, end) by common prompt prefix (prefixes_, prefix_of_, prefix_len_of_): each joins
  /// a prefix in use (join_live_prefix) or forms a group with the others and the waiting requests that have
  /// none; queues them group by group.
  void plan_prefixes(size_t first);
  /// Request i joins the live prefix it shares the most tokens with (at least kMinSharedPrefix, leaving it
  /// its last prompt token). False when none qualifies.
  bool join_live_prefix(size_t i);
  void admit();
  /// Frees a's slot, and its prefix's slot when a was the prefix's last member.
  void release(const Active& a);
  /// One member of prefix p is gone: frees the prefix's slot when it held one and no member is left.
  void leave_prefix(int p);
  bool needs_logits(const Active& a) const;
  /// Points c at a's shared prefix, when it has one.
  void set_prefix(const Active& a, SeqChunk* c) const {
    if (a.prefix < 0) return;
    c->prefix_slot = prefixes_[a.prefix].slot;
    c->prefix_len = static_cast<int>(a.prefix_len);
  }
  /// Prefill of the requests admitted last (pieces of at most kMaxPrefillTokens), with one decode row for
  /// each request already decoding in the same forward.
  void step_prefill();
  void step_decode();
  /// The chunk that feeds a decoding request's last output token.
  SeqChunk decode_chunk(const Active& a) const;
  /// Choose the next token of `a` from its logits row (or the runner's argmax), then finish or stream.
  void take_token(Active& a, const float* logits_row, int32_t argmax);
  void finish(Active& a, const std::string& reason);
  /// Gives text[streamed, upto) to on_text with the output ids it completes (results_ text_tokens);
  /// at_stop: upto is where a stop string starts, and every token that starts before it counts.
  void stream(Active& a, size_t upto, bool at_stop = false);

  ModelRunner& runner_;
  const Tokenizer& tok_;
  /// Drops the records of the oldest requests while they are taken (their slots and prefixes are
  /// released by then): what keeps a long-running server's memory flat.
  void drop_taken() {
    while (results_.first() < results_.size() && results_[results_.first()].finish_reason == "taken") {
      requests_.pop_front();
      results_.pop_front();
      prefix_of_.pop_front();
      prefix_len_of_.pop_front();
    }
  }

  IndexedRecords<GenerationRequest> requests_;
  const GenerateCallbacks cb_;
  const int64_t vocab_;
  std::set<int32_t> eos_;
  IndexedRecords<GenerationResult> results_;
  std::deque<size_t> waiting_;
  std::vector<SharedPrefix> prefixes_;
  IndexedRecords<int> prefix_of_;  ///< per request: index into prefixes_, -1: none
  IndexedRecords<size_t> prefix_len_of_;  ///< per request: the positions of its prefix it reads
  std::vector<int> live_prefixes_;  ///< prefixes with members left (joinable)
  std::vector<std::unique_ptr<Active>> active_;
  std::vector<int> free_slots_;
  GenerationStats stats_;
  bool in_step_ = false;  ///< step() is running (callbacks may not cancel)
  size_t max_running_ = 0;  ///< 0: no limit but the slots
};

/// Longest common prefix of a and b, leaving each at least its last token (which must be fed to get
/// its first logits).
static size_t common_prefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  const size_t limit = std::min(a.size(), b.size()) - 1;  // prompts are never empty (validate)
  size_t n = 0;
  while (n < limit && a[n] == b[n]) ++n;
  return n;
}

bool BatchGenerator::Impl::join_live_prefix(size_t i) {
  const std::vector<int32_t>& prompt = requests_[i].prompt_ids;
  int best = -1;
  size_t best_len = 0;
  for (const int p : live_prefixes_) {
    const std::vector<int32_t>& t = prefixes_[p].tokens;
    const size_t limit = std::min(t.size(), prompt.size() - 1);  // prompts are never empty (validate)
    size_t n = 0;
    while (n < limit && t[n] == prompt[n]) ++n;
    if (n >= kMinSharedPrefix && n > best_len) best = p, best_len = n;
  }
  if (best < 0) return false;
  prefix_of_[i] = best;
  prefix_len_of_[i] = best_len;
  ++prefixes_[best].members_left;
  return true;
}

void BatchGenerator::Impl::plan_prefixes(size_t first) {
  const size_t end_all = requests_.size();
  prefix_of_.resize(end_all, -1);
  prefix_len_of_.resize(end_all, 0);
  // Requests that want their prompt's log-probabilities prefill it whole (each position's logits).
  auto shareable = [&](size_t i) { return requests_[i].params.prompt_logprobs < 0; };
  if (runner_.max_batch() >= 2 && tuning().shared_prefix) {  // a prefix needs a slot besides its members'
    std::vector<size_t> sorted;  // candidates for new groups: waiting requests without one, then the new ones
    for (const size_t w : waiting_)
      if (prefix_of_[w] < 0 && shareable(w)) sorted.push_back(w);
    for (size_t i = first; i < end_all; ++i)
      if (shareable(i) && !join_live_prefix(i)) sorted.push_back(i);
    const size_t n = sorted.size();
    std::stable_sort(sorted.begin(), sorted.end(),
                     [&](size_t a, size_t b) { return requests_[a].prompt_ids < requests_[b].prompt_ids; });
    // In sorted order the common prefix of a run is the least common prefix of neighbours; a run grows
    // while that stays >= kMinSharedPrefix.
    for (size_t begin = 0; begin < n;) {
      size_t end = begin + 1, length = SIZE_MAX;
      while (end < n) {
        const size_t l = std::min(length, common_prefix(requests_[sorted[end - 1]].prompt_ids, requests_[sorted[end]].prompt_ids));
        if (l < kMinSharedPrefix) break;
        length = l;
        ++end;
      }
      if (end - begin >= 2) {
        SharedPrefix p;
        p.length = length;
        p.tokens.assign(requests_[sorted[begin]].prompt_ids.begin(), requests_[sorted[begin]].prompt_ids.begin() + length);
        p.members_left = static_cast<int>(end - begin);
        for (size_t i = begin; i < end; ++i) {
          prefix_of_[sorted[i]] = static_cast<int>(prefixes_.size());
          prefix_len_of_[sorted[i]] = length;
        }
        live_prefixes_.push_back(static_cast<int>(prefixes_.size()));
        prefixes_.push_back(p);
      }
      begin = end;
    }
  }
  // Queue order: groups (and requests without one) by their first request, members in request order.
  std::vector<std::vector<size_t>> units;
  std::vector<int> unit_of_prefix(prefixes_.size(), -1);
  for (size_t i = first; i < end_all; ++i) {
    const int p = prefix_of_[i];
    if (p < 0) {
      units.push_back({i});
    } else {
      if (unit_of_prefix[p] < 0) {
        unit_of_prefix[p] = static_cast<int>(units.size());
        units.emplace_back();
      }
      units[unit_of_prefix[p]].push_back(i);
    }
  }
  for (const auto& u : units) waiting_.insert(waiting_.end(), u.begin(), u.end());
}

void BatchGenerator::Impl::admit() {
  while (!free_slots_.empty() && !waiting_.empty() && (max_running_ == 0 || active_.size() < max_running_)) {
    const size_t req = waiting_.front();
    const int p = prefix_of_[req];
    if (p >= 0 && prefixes_[p].slot < 0) {  // the group's first member: its prefix needs a slot too
      if (free_slots_.size() < 2) break;
      prefixes_[p].slot = free_slots_.back();
      free_slots_.pop_back();
    }
    auto a = std::make_unique<Active>();
    a->req = req;
    waiting_.pop_front();
    a->slot = free_slots_.back();
    free_slots_.pop_back();
    a->prefix = p;
    if (p >= 0) {
      a->prefix_len = a->prefilled = prefix_len_of_[req];
      stats_.shared_prefix_tokens += static_cast<int64_t>(a->prefix_len);
    }
    a->decoder = std::make_unique<StreamDecoder>(tok_, true);
    a->decoder->prime(requests_[a->req].prompt_ids);  // output text continues the prompt's (leading space kept)
    results_[a->req].id = requests_[a->req].id;
    results_[a->req].prompt_tokens = static_cast<int>(requests_[a->req].prompt_ids.size());
    if (requests_[a->req].params.max_new_tokens == 0 && requests_[a->req].params.prompt_logprobs < 0) {
      finish(*a, "length");
      release(*a);
      continue;
    }
    active_.push_back(std::move(a));
  }
}

void BatchGenerator::Impl::release(const Active& a) {
  free_slots_.push_back(a.slot);
  if (a.prefix >= 0) leave_prefix(a.prefix);
}

void BatchGenerator::Impl::leave_prefix(int index) {
  SharedPrefix& p = prefixes_[index];
  if (--p.members_left > 0) return;
  live_prefixes_.erase(std::find(live_prefixes_.begin(), live_prefixes_.end(), index));
  p.tokens = {};  // only live prefixes are joined: its copy of the tokens is not needed any more
  if (p.slot >= 0) {
    free_slots_.push_back(p.slot);
    p.slot = -1;
  }
}

bool BatchGenerator::Impl::cancel(size_t index) {
  TPS_CHECK(!in_step_, "generate: cancel(" + std::to_string(index) + ") during step()",
            "this is a bug in the caller: cancel between steps, not from a callback");
  if (!requests_.holds(index) || !results_[index].finish_reason.empty()) return false;
  GenerationResult& res = results_[index];
  for (size_t i = 0; i < active_.size(); ++i) {
    Active& a = *active_[i];
    if (a.req != index) continue;
    res.text = a.text.substr(0, a.streamed);
    res.finish_reason = "abort";
    release(a);
    active_.erase(active_.begin() + static_cast<std::ptrdiff_t>(i));
    if (cb_.on_done) cb_.on_done(index, res);
    return true;
  }
  const auto w = std::find(waiting_.begin(), waiting_.end(), index);
  if (w == waiting_.end()) return false;
  waiting_.erase(w);
  if (prefix_of_[index] >= 0) leave_prefix(prefix_of_[index]);
  res.id = requests_[index].id;
  res.prompt_tokens = static_cast<int>(requests_[index].prompt_ids.size());
  res.finish_reason = "abort";
  if (cb_.on_done) cb_.on_done(index, res);
  return true;
}

bool BatchGenerator::Impl::needs_logits(const Active& a) const {
  const SamplingParams& p = requests_[a.req].params;
  const bool mask_eos = !eos_.empty() && static_cast<int>(a.output.size()) < p.min_new_tokens;
  return p.temperature > 0.0f || p.repetition_penalty != 1.0f || mask_eos || p.logprobs >= 0;
}

void BatchGenerator::Impl::step_prefill() {
  std::vector<SeqChunk> chunks;
  std::vector<Active*> owners;  // nullptr: a shared prefix's chunk
  int64_t budget = kMaxPrefillTokens;
  int64_t row_budget = std::max<int64_t>(1, kScoreRowFloats / vocab_);  // logits rows of all_logits chunks
  // Shared prefixes first; a member's suffix waits until its prefix is complete before this step (no
  // chunk may read a prefix that the same forward() writes).
  std::vector<bool> prefix_ready(prefixes_.size());
  for (size_t i = 0; i < prefixes_.size(); ++i) prefix_ready[i] = prefixes_[i].prefilled == prefixes_[i].length;
  for (SharedPrefix& p : prefixes_) {
    if (p.slot < 0 || p.prefilled == p.length || budget == 0) continue;
    const auto& prompt = p.tokens;
    const size_t n = std::min<size_t>(p.length - p.prefilled, static_cast<size_t>(budget));
    SeqChunk c;
    c.slot = p.slot;
    c.start_pos = static_cast<int>(p.prefilled);
    c.tokens.assign(prompt.begin() + p.prefilled, prompt.begin() + p.prefilled + n);
    chunks.push_back(std::move(c));
    owners.push_back(nullptr);
    budget -= static_cast<int64_t>(n);
    p.prefilled += n;
    stats_.prefill_tokens += static_cast<int64_t>(n);
  }
  for (auto& a : active_) {
    const auto& prompt = requests_[a->req].prompt_ids;
    if (a->prefilled == prompt.size() || budget == 0) continue;
    if (a->prefix >= 0 && !prefix_ready[a->prefix]) continue;
    size_t n = std::min<size_t>(prompt.size() - a->prefilled, static_cast<size_t>(budget));
    const bool all_logits = requests_[a->req].params.prompt_logprobs >= 0;
    if (all_logits) {  // every position's logits: bounded rows per forward (prompt_scores.h)
      if (row_budget == 0) continue;
      n = std::min<size_t>(n, static_cast<size_t>(row_budget));
      row_budget -= static_cast<int64_t>(n);
    }
    SeqChunk c;
    c.slot = a->slot;
    c.start_pos = static_cast<int>(a->prefilled);
    c.tokens.assign(prompt.begin() + a->prefilled, prompt.begin() + a->prefilled + n);
    c.all_logits = all_logits;
    set_prefix(*a, &c);
    chunks.push_back(std::move(c));
    owners.push_back(a.get());
    budget -= static_cast<int64_t>(n);
  }
  // The requests already decoding ride along with their next token (one forward, one read of the
  // weights, instead of a prefill step that stalls them and a decode step after it).
  const size_t first_decode = chunks.size();
  for (auto& a : active_) {
    if (a->output.empty()) continue;  // still prefilling (or its first token comes from this step)
    chunks.push_back(decode_chunk(*a));
    owners.push_back(a.get());
  }
  bool want_logits = false;
  for (size_t i = 0; i < owners.size(); ++i)
    want_logits = want_logits || (owners[i] && needs_logits(*owners[i])) || chunks[i].all_logits;
  const size_t rows = output_rows(chunks);
  std::vector<float> logits(want_logits ? rows * vocab_ : 0);
  std::vector<int32_t> argmax(rows);
  const auto t0 = Clock::now();
  runner_.forward(chunks, want_logits ? logits.data() : nullptr, argmax.data());
  stats_.prefill_seconds += std::chrono::duration<double>(Clock::now() - t0).count();
  stats_.decode_tokens += static_cast<int64_t>(chunks.size() - first_decode);
  stats_.mixed_decode_tokens += static_cast<int64_t>(chunks.size() - first_decode);
  size_t row = 0;  // first output row of chunk i
  for (size_t i = 0; i < owners.size(); ++i) {
    const size_t chunk_rows = chunks[i].all_logits ? chunks[i].tokens.size() : 1;
    const size_t last = row + chunk_rows - 1;
    if (i >= first_decode) {
      take_token(*owners[i], want_logits ? logits.data() + last * vocab_ : nullptr, argmax[last]);
    } else if (owners[i]) {
      Active& a = *owners[i];
      const GenerationRequest& r = requests_[a.req];
      if (chunks[i].all_logits)
        for (size_t k = 0; k < chunk_rows; ++k) {  // row k predicts prompt[start + k + 1]
          const size_t next = a.prefilled + k + 1;
          if (next < r.prompt_ids.size())
            results_[a.req].prompt_logprobs.push_back(
                row_logprob(logits.data() + (row + k) * vocab_, vocab_, r.prompt_ids[next], r.params.prompt_logprobs));
        }
      a.prefilled += chunks[i].tokens.size();
      stats_.prefill_tokens += static_cast<int64_t>(chunks[i].tokens.size());
      if (a.prefilled == r.prompt_ids.size()) {
        if (r.params.max_new_tokens == 0) finish(a, "length");  // prefilled for its prompt log-probabilities only
        else take_token(a, want_logits ? logits.data() + last * vocab_ : nullptr, argmax[last]);
      }
    }
    row += chunk_rows;
  }
}

SeqChunk BatchGenerator::Impl::decode_chunk(const Active& a) const {
  SeqChunk c;
  c.slot = a.slot;
  c.start_pos = static_cast<int>(requests_[a.req].prompt_ids.size() + a.output.size() - 1);
  c.tokens = {a.output.back()};
  c.last_step = static_cast<int>(a.output.size()) + 1 >= requests_[a.req].params.max_new_tokens;
  set_prefix(a, &c);
  return c;
}

void BatchGenerator::Impl::step_decode() {
  std::vector<SeqChunk> chunks;
  bool want_logits = false;
  for (auto& a : active_) {
    chunks.push_back(decode_chunk(*a));
    want_logits = want_logits || needs_logits(*a);
  }
  std::vector<float> logits(want_logits ? chunks.size() * vocab_ : 0);
  std::vector<int32_t> argmax(chunks.size());
  const auto t0 = Clock::now();
  runner_.forward(chunks, want_logits ? logits.data() : nullptr, argmax.data());
  stats_.decode_seconds += std::chrono::duration<double>(Clock::now() - t0).count();
  stats_.decode_tokens += static_cast<int64_t>(chunks.size());
  std::vector<Active*> owners;
  for (auto& a : active_) owners.push_back(a.get());
  for (size_t i = 0; i < owners.size(); ++i) take_token(*owners[i], want_logits ? logits.data() + i * vocab_ : nullptr, argmax[i]);
}

void BatchGenerator::Impl::take_token(Active& a, const float* logits_row, int32_t argmax) {
  const GenerationRequest& r = requests_[a.req];
  const SamplingParams& p = r.params;
  int32_t token = argmax;
  const bool sample = p.temperature > 0.0f || p.repetition_penalty != 1.0f ||
                      (!eos_.empty() && static_cast<int>(a.output.size()) < p.min_new_tokens);
  if (logits_row && sample) {
    std::vector<float> row(logits_row, logits_row + vocab_);
    if (p.repetition_penalty != 1.0f) {
      std::vector<int32_t> seen = r.prompt_ids;
      seen.insert(seen.end(), a.output.begin(), a.output.end());
      apply_repetition_penalty(row.data(), vocab_, seen, p.repetition_penalty);
    }
    if (static_cast<int>(a.output.size()) < p.min_new_tokens)
      for (int32_t id : eos_)
        if (id >= 0 && id < vocab_) row[id] = -INFINITY;
    token = sample_token(row.data(), vocab_, p, counter_uniform(p.seed, rng_stream(r, a.req), a.output.size()));
  }
  if (p.logprobs >= 0 && logits_row)
    results_[a.req].logprobs.push_back(row_logprob(logits_row, vocab_, token, p.logprobs));
  a.output.push_back(token);
  results_[a.req].output_ids.push_back(token);
  if (!p.ignore_eos && eos_.count(token)) {
    finish(a, "eos");
    return;
  }
  const size_t old_size = a.text.size();
  // Models may have more embedding rows than the tokenizer has tokens (e.g. Pythia: 50304 vs 50277);
  // such ids have no text.
  if (token < tok_.vocab_size()) a.text += a.decoder->push(token);
  a.token_end.push_back(a.text.size());
  const size_t stop_at = find_stop_string(a.text, old_size, p.stop);
  if (stop_at != std::string::npos) {
    a.text.resize(stop_at);
    finish(a, "stop");
    return;
  }
  if (static_cast<int>(a.output.size()) >= p.max_new_tokens) {
    finish(a, "length");
    return;
  }
  stream(a, a.text.size() - stop_string_holdback(a.text, p.stop));
}

void BatchGenerator::Impl::stream(Active& a, size_t upto, bool at_stop) {
  // Token k's text is text[start(k), token_end[k]). A token counts once its text is given out in full (one
  // without text: once text after it is); at a stop string, once any of its text is.
  const auto start = [&a](size_t k) { return k == 0 ? size_t{0} : a.token_end[k - 1]; };
  GenerationResult& res = results_[a.req];
  while (res.text_tokens < a.token_end.size() && start(res.text_tokens) < upto &&
         (at_stop || a.token_end[res.text_tokens] <= upto))
    ++res.text_tokens;
  if (upto > a.streamed) {
    if (cb_.on_text) cb_.on_text(a.req, a.text.substr(a.streamed, upto - a.streamed), res);
    a.streamed = upto;
  }
}

void BatchGenerator::Impl::finish(Active& a, const std::string& reason) {
  std::string why = reason;
  if (why != "stop") {
    // Text the decoder held back (an incomplete UTF-8 tail) may still complete a stop string.
    const size_t old_size = a.text.size();
    a.text += a.decoder->flush();
    const size_t stop_at = find_stop_string(a.text, old_size, requests_[a.req].params.stop);
    if (stop_at != std::string::npos) {
      a.text.resize(stop_at);
      why = "stop";
    }
  }
  if (why != "stop") results_[a.req].text_tokens = a.output.size();  // all, those without text (EOS) too
  stream(a, a.text.size(), why == "stop");
  GenerationResult& res = results_[a.req];
  res.text = a.text;
  res.finish_reason = why;
  if (cb_.on_done) cb_.on_done(a.req, res);
}

size_t BatchGenerator::Impl::add(std::vector<GenerationRequest> requests) {
  for (const GenerationRequest& r : requests)
    check_request(r, runner_.max_seq_len(), "request " + r.id, model_position_limit(runner_.config()));
  const size_t first = requests_.size();
  for (GenerationRequest& r : requests) requests_.push_back(std::move(r));
  results_.resize(requests_.size());
  plan_prefixes(first);
  return first;
}

void BatchGenerator::Impl::step() {
  in_step_ = true;
  struct Done {
    bool& flag;
    ~Done() { flag = false; }
  } done{in_step_};
  admit();
  if (active_.empty()) {
    drop_taken();  // results taken by callbacks during admit()
    return;
  }
  bool prefill_pending = false;
  for (auto& a : active_) prefill_pending = prefill_pending || a->prefilled < requests_[a->req].prompt_ids.size();
  if (prefill_pending) step_prefill();
  else step_decode();
  // Retire finished requests (their results are complete) and free their slots.
  for (size_t i = 0; i < active_.size();) {
    if (!results_[active_[i]->req].finish_reason.empty()) {
      release(*active_[i]);
      active_.erase(active_.begin() + static_cast<std::ptrdiff_t>(i));
    } else {
      ++i;
    }
  }
  drop_taken();  // results taken by callbacks during the step
}

BatchGenerator::BatchGenerator(ModelRunner& runner, const Tokenizer& tokenizer, GenerateCallbacks callbacks)
    : impl_(std::make_unique<Impl>(runner, tokenizer, std::move(callbacks))) {}
BatchGenerator::~BatchGenerator() = default;
size_t BatchGenerator::add(std::vector<GenerationRequest> requests) { return impl_->add(std::move(requests)); }
bool BatchGenerator::busy() const { return impl_->busy(); }
void BatchGenerator::step() { impl_->step(); }
GenerationResult BatchGenerator::take_result(size_t index) { return impl_->take_result(index); }
bool BatchGenerator::cancel(size_t index) { return impl_->cancel(index); }
int BatchGenerator::slots_in_use() const { return impl_->slots_in_use(); }
size_t BatchGenerator::running() const { return impl_->running(); }
void BatchGenerator::set_max_running(size_t n) { impl_->set_max_running(n); }
size_t BatchGenerator::waiting() const { return impl_->waiting(); }
size_t BatchGenerator::records_held() const { return impl_->records_held(); }
const GenerationStats& BatchGenerator::stats() const { return impl_->stats(); }

std::vector<GenerationResult> generate(ModelRunner& runner, const Tokenizer& tokenizer,
                                       const std::vector<GenerationRequest>& requests, const GenerateCallbacks& callbacks,
                                       GenerationStats* stats) {
  BatchGenerator g(runner, tokenizer, callbacks);
  g.add(requests);
  while (g.busy()) g.step();
  std::vector<GenerationResult> results;
  results.reserve(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) results.push_back(g.take_result(i));
  if (stats) *stats = g.stats();
  return results;
}

}  // namespace tpshard
