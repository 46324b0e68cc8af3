// chunk_rounds.cpp: forward() in rounds of bounded pieces (see chunk_rounds.h).
#include "runtime/chunk_rounds.h"

#include <algorithm>
#include <cstring>

#include "format/error.h"

namespace tpshard {

bool needs_rounds(const std::vector<SeqChunk>& chunks, int64_t max_positions) {
  return std::any_of(chunks.begin(), chunks.end(), [&](const SeqChunk& c) {
    return static_cast<int64_t>(c.tokens.size()) > max_positions;
  });
}

void forward_in_rounds(const std::vector<SeqChunk>& chunks, int64_t max_positions, int64_t vocab_size, float* logits,
                       int32_t* argmax, const ForwardFn& step) {
  TPS_CHECK(max_positions >= 1, "forward in rounds: a step limit of " + std::to_string(max_positions) + " positions",
            "this is a bug: model/kv_ring.h gives at least 1");
  // First output row of each chunk in the unsplit call.
  std::vector<size_t> first_row(chunks.size());
  size_t rows = 0;
  for (size_t i = 0; i < chunks.size(); ++i) {
    first_row[i] = rows;
    rows += chunks[i].all_logits ? chunks[i].tokens.size() : 1;
  }
  const size_t V = static_cast<size_t>(vocab_size);
  std::vector<float> round_logits;
  std::vector<int32_t> round_argmax;
  for (size_t offset = 0;; offset += static_cast<size_t>(max_positions)) {
    std::vector<SeqChunk> pieces;
    std::vector<size_t> owner;  // chunk index of each piece
    for (size_t i = 0; i < chunks.size(); ++i) {
      const SeqChunk& c = chunks[i];
      if (offset >= c.tokens.size()) continue;
      const size_t n = std::min(c.tokens.size() - offset, static_cast<size_t>(max_positions));
      SeqChunk p;
      p.slot = c.slot;
      p.start_pos = c.start_pos + static_cast<int>(offset);
      p.tokens.assign(c.tokens.begin() + static_cast<std::ptrdiff_t>(offset),
                      c.tokens.begin() + static_cast<std::ptrdiff_t>(offset + n));
      p.last_step = c.last_step && offset + n == c.tokens.size();
      p.prefix_slot = c.prefix_slot;
      p.prefix_len = c.prefix_len;
      p.all_logits = c.all_logits;
      pieces.push_back(std::move(p));
      owner.push_back(i);
    }
    if (pieces.empty()) break;
    const size_t round_rows = output_rows(pieces);
    if (logits) round_logits.resize(round_rows * V);
    if (argmax) round_argmax.resize(round_rows);
    step(pieces, logits ? round_logits.data() : nullptr, argmax ? round_argmax.data() : nullptr);
    size_t r = 0;
    for (size_t k = 0; k < pieces.size(); ++k) {
      const SeqChunk& c = chunks[owner[k]];
      const size_t n = pieces[k].tokens.size();
      const bool last_piece = offset + n == c.tokens.size();
      // Destination rows: every row of an all_logits piece; the last piece's single row otherwise.
      const size_t count = c.all_logits ? n : 1;
      if (c.all_logits || last_piece) {
        const size_t dst = c.all_logits ? first_row[owner[k]] + offset : first_row[owner[k]];
        if (logits) std::memcpy(logits + dst * V, round_logits.data() + r * V, count * V * sizeof(float));
        if (argmax) std::memcpy(argmax + dst, round_argmax.data() + r, count * sizeof(int32_t));
      }
      r += count;
    }
  }
}

}  // namespace tpshard
