// fake_model.h: a deterministic stand-in model for the batch-job tests: a byte-level tokenizer
// (id = byte, 256 = EOS, 257 = BOS) and a ModelRunner whose next token depends only on the last
// token and its position, so results do not depend on batching and can be checked by hand.
#pragma once
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "runtime/model_runner.h"
#include "tokenizer/tokenizer.h"

namespace tpshard::test {

class ByteTokenizer : public Tokenizer {
 public:
  static constexpr int32_t kEos = 256, kBos = 257;
  std::vector<int32_t> encode(const std::string& text, bool add_special_tokens) const override {
    std::vector<int32_t> ids;
    if (add_special_tokens) ids.push_back(kBos);
    for (unsigned char c : text) ids.push_back(c);
    return ids;
  }
  std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const override {
    std::string s;
    for (int32_t id : ids) {
      if (id < 256) s.push_back(static_cast<char>(id));
      else if (!skip_special_tokens) s += id == kEos ? "</s>" : "<s>";
    }
    return s;
  }
  int64_t vocab_size() const override { return 258; }
  int32_t bos_id() const override { return kBos; }
  std::vector<int32_t> eos_ids() const override { return {kEos}; }
  bool is_special(int32_t id) const override { return id >= 256; }
};

/// Next token after `last` at position `pos`: v = (last + pos) % 28; 'a' + v for v < 26, '\n' for 26, EOS for 27.
inline int32_t fake_next_token(int32_t last, int64_t pos) {
  const int64_t v = (last + pos) % 28;
  return v < 26 ? static_cast<int32_t>('a' + v) : (v == 26 ? '\n' : ByteTokenizer::kEos);
}

class FakeRunner : public ModelRunner {
 public:
  explicit FakeRunner(int max_batch = 4, int max_seq_len = 1024) : max_batch_(max_batch), max_seq_len_(max_seq_len) {
    config_.vocab_size = 258;
    config_.max_position_embeddings = max_seq_len;
  }
  const ModelConfig& config() const override { return config_; }
  int max_batch() const override { return max_batch_; }
  int max_seq_len() const override { return max_seq_len_; }
  void forward(const std::vector<SeqChunk>& chunks, float* logits, int32_t* argmax) override {
    if (fail_after_forwards >= 0 && forwards >= fail_after_forwards) throw std::runtime_error("simulated kill");
    ++forwards;
    for (size_t i = 0; i < chunks.size(); ++i) {
      const SeqChunk& c = chunks[i];
      const int64_t pos = c.start_pos + static_cast<int64_t>(c.tokens.size()) - 1;
      const int32_t next = fake_next_token(c.tokens.back(), pos);
      if (argmax != nullptr) argmax[i] = next;
      if (logits != nullptr) {
        float* row = logits + i * config_.vocab_size;
        std::memset(row, 0, sizeof(float) * static_cast<size_t>(config_.vocab_size));
        row[next] = 20.0f;
      }
    }
  }
  int forwards = 0;
  int fail_after_forwards = -1;  ///< throw from the forward call with this index (simulates a kill)

 private:
  ModelConfig config_;
  int max_batch_, max_seq_len_;
};

}  // namespace tpshard::test
