// tensor_plan.cpp: the HF -> tpshard name table and slicing rules (see tensor_plan.h, docs/FORMAT.md
// "Layout transforms"). Megatron-LM partitioning: column parallel = output rows split, row parallel =
// input columns split; row-parallel biases are replicated and added once after all_reduce.
#include "format/convert/tensor_plan.h"

#include "format/error.h"
#include "format/tensor_names.h"

namespace tpshard {

namespace {

using Shape = std::vector<int64_t>;

void add(std::vector<OutputTensor>& v, std::string name, std::vector<std::string> src, std::vector<Shape> shapes,
         SplitKind split, Transform tr) {
  v.push_back(OutputTensor{std::move(name), std::move(src), std::move(shapes), split, tr});
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

std::vector<OutputTensor> plan_tensors(const ModelConfig& c) {
  const int64_t H = c.hidden_size, I = c.intermediate_size, V = c.vocab_size, hd = c.head_dim;
  const int64_t q_rows = c.num_attention_heads * hd, kv_rows = c.num_key_value_heads * hd;
  const auto R = SplitKind::Replicated, Col = SplitKind::Column, Row = SplitKind::Row, Voc = SplitKind::Vocab;
  std::vector<OutputTensor> v;
  if (c.arch == Arch::GptNeoX) {
    add(v, names::kTokenEmbd, {"gpt_neox.embed_in.weight"}, {{V, H}}, Voc, Transform::VocabRows);
    for (int l = 0; l < c.num_hidden_layers; ++l) {
      const std::string p = "gpt_neox.layers." + std::to_string(l) + ".";
      add(v, names::blk(l, "attn_norm.weight"), {p + "input_layernorm.weight"}, {{H}}, R, Transform::Replicate);
      add(v, names::blk(l, "attn_norm.bias"), {p + "input_layernorm.bias"}, {{H}}, R, Transform::Replicate);
      add(v, names::blk(l, "attn_qkv.weight"), {p + "attention.query_key_value.weight"}, {{3 * q_rows, H}}, Col, Transform::NeoxQkv);
      if (c.attention_bias)
        add(v, names::blk(l, "attn_qkv.bias"), {p + "attention.query_key_value.bias"}, {{3 * q_rows}}, Col, Transform::NeoxQkv);
      add(v, names::blk(l, "attn_output.weight"), {p + "attention.dense.weight"}, {{H, q_rows}}, Row, Transform::ColsSplit);
      if (c.attention_out_bias)
        add(v, names::blk(l, "attn_output.bias"), {p + "attention.dense.bias"}, {{H}}, R, Transform::Replicate);
      add(v, names::blk(l, "ffn_norm.weight"), {p + "post_attention_layernorm.weight"}, {{H}}, R, Transform::Replicate);
      add(v, names::blk(l, "ffn_norm.bias"), {p + "post_attention_layernorm.bias"}, {{H}}, R, Transform::Replicate);
      add(v, names::blk(l, "ffn_up.weight"), {p + "mlp.dense_h_to_4h.weight"}, {{I, H}}, Col, Transform::RowsSplit);
      add(v, names::blk(l, "ffn_up.bias"), {p + "mlp.dense_h_to_4h.bias"}, {{I}}, Col, Transform::RowsSplit);
      add(v, names::blk(l, "ffn_down.weight"), {p + "mlp.dense_4h_to_h.weight"}, {{H, I}}, Row, Transform::ColsSplit);
      add(v, names::blk(l, "ffn_down.bias"), {p + "mlp.dense_4h_to_h.bias"}, {{H}}, R, Transform::Replicate);
    }
    add(v, names::kOutputNormWeight, {"gpt_neox.final_layer_norm.weight"}, {{H}}, R, Transform::Replicate);
    add(v, names::kOutputNormBias, {"gpt_neox.final_layer_norm.bias"}, {{H}}, R, Transform::Replicate);
    if (!c.tie_word_embeddings) add(v, names::kOutput, {"embed_out.weight"}, {{V, H}}, Voc, Transform::VocabRows);
    return v;
  }
  add(v, names::kTokenEmbd, {"model.embed_tokens.weight"}, {{V, H}}, Voc, Transform::VocabRows);
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    const std::string a = p + "self_attn.", m = p + "mlp.";
    add(v, names::blk(l, "attn_norm.weight"), {p + "input_layernorm.weight"}, {{H}}, R, Transform::Replicate);
    add(v, names::blk(l, "attn_qkv.weight"), {a + "q_proj.weight", a + "k_proj.weight", a + "v_proj.weight"},
        {{q_rows, H}, {kv_rows, H}, {kv_rows, H}}, Col, Transform::LlamaQkv);
    if (c.attention_bias)
      add(v, names::blk(l, "attn_qkv.bias"), {a + "q_proj.bias", a + "k_proj.bias", a + "v_proj.bias"},
          {{q_rows}, {kv_rows}, {kv_rows}}, Col, Transform::LlamaQkv);
    add(v, names::blk(l, "attn_output.weight"), {a + "o_proj.weight"}, {{H, q_rows}}, Row, Transform::ColsSplit);
    if (c.attention_out_bias)
      add(v, names::blk(l, "attn_output.bias"), {a + "o_proj.bias"}, {{H}}, R, Transform::Replicate);
    add(v, names::blk(l, "ffn_norm.weight"), {p + "post_attention_layernorm.weight"}, {{H}}, R, Transform::Replicate);
    add(v, names::blk(l, "ffn_gate_up.weight"), {m + "gate_proj.weight", m + "up_proj.weight"}, {{I, H}, {I, H}}, Col,
        Transform::GateUp);
    if (c.mlp_bias)
      add(v, names::blk(l, "ffn_gate_up.bias"), {m + "gate_proj.bias", m + "up_proj.bias"}, {{I}, {I}}, Col, Transform::GateUp);
    add(v, names::blk(l, "ffn_down.weight"), {m + "down_proj.weight"}, {{H, I}}, Row, Transform::ColsSplit);
    if (c.mlp_bias) add(v, names::blk(l, "ffn_down.bias"), {m + "down_proj.bias"}, {{H}}, R, Transform::Replicate);
  }
  add(v, names::kOutputNormWeight, {"model.norm.weight"}, {{H}}, R, Transform::Replicate);
  if (!c.tie_word_embeddings) add(v, names::kOutput, {"lm_head.weight"}, {{V, H}}, Voc, Transform::VocabRows);
  return v;
}

RankSlice slice_for_rank(const OutputTensor& t, const ModelConfig& c, const TpLayout& L, int r) {
  RankSlice s;
  const Shape& src = t.source_shapes.at(0);
  const bool one_d = src.size() == 1;
  const int64_t src_rows = src[0], src_cols = one_d ? 1 : src[1];
  const int64_t tp = L.tp_size, hd = c.head_dim;
  int64_t local_rows = src_rows;
  s.local_cols = src_cols;
  switch (t.transform) {
    case Transform::Replicate:
      s.spans.push_back({0, 0, src_rows, 0});
      break;
    case Transform::RowsSplit: {
      local_rows = src_rows / tp;
      s.spans.push_back({0, r * local_rows, local_rows, 0});
      break;
    }
    case Transform::ColsSplit: {
      s.local_cols = src_cols / tp;
      s.spans.push_back({0, 0, src_rows, r * s.local_cols});
      break;
    }
    case Transform::VocabRows: {
      local_rows = L.vocab_size_per_rank;
      const int64_t begin = r * local_rows, end = std::min<int64_t>(begin + local_rows, c.vocab_size);
      if (end > begin) s.spans.push_back({0, begin, end - begin, 0});
      const int64_t pad = local_rows - std::max<int64_t>(end - begin, 0);
      if (pad > 0) s.spans.push_back({-1, 0, pad, 0});
      break;
    }
    case Transform::NeoxQkv: {
      // Source rows of head h: q at (3h+0)*hd, k at (3h+1)*hd, v at (3h+2)*hd (per-head interleave).
      const int64_t h0 = r * L.num_heads_per_rank;
      for (int part = 0; part < 3; ++part)
        for (int64_t h = h0; h < h0 + L.num_heads_per_rank; ++h) s.spans.push_back({0, (3 * h + part) * hd, hd, 0});
      local_rows = 3 * L.num_heads_per_rank * hd;
      break;
    }
    case Transform::LlamaQkv: {
      const int64_t kv0 = L.first_kv_head(r, c);
      s.spans.push_back({0, r * L.num_heads_per_rank * hd, L.num_heads_per_rank * hd, 0});
      s.spans.push_back({1, kv0 * hd, L.num_kv_heads_per_rank * hd, 0});
      s.spans.push_back({2, kv0 * hd, L.num_kv_heads_per_rank * hd, 0});
      local_rows = (L.num_heads_per_rank + 2 * L.num_kv_heads_per_rank) * hd;
      break;
    }
    case Transform::GateUp: {
      const int64_t ipr = L.intermediate_size_per_rank;
      s.spans.push_back({0, r * ipr, ipr, 0});
      s.spans.push_back({1, r * ipr, ipr, 0});
      local_rows = 2 * ipr;
      break;
    }
  }
  if (one_d) {
    s.local_shape = {local_rows};
  } else {
    s.local_shape = {local_rows, s.local_cols};
  }
  s.global_shape = s.local_shape;
  if (t.split == SplitKind::Replicated) {
    s.split_axis = -1;
  } else {
    s.split_axis = t.split == SplitKind::Row ? 1 : 0;
    s.global_shape[s.split_axis] *= tp;
  }
  return s;
}

bool is_ignorable_source(const std::string& n, const ModelConfig& c) {
  if (ends_with(n, ".rotary_emb.inv_freq")) return true;
  if (c.arch == Arch::GptNeoX && (ends_with(n, ".attention.bias") || ends_with(n, ".attention.masked_bias"))) return true;
  if (c.tie_word_embeddings && (n == "lm_head.weight" || n == "embed_out.weight")) return true;
  return false;
}

}  // namespace tpshard
