// tensor_plan.cpp: canonical names and split kinds of the roles, the per-rank slicing rules (see
// tensor_plan.h, docs/FORMAT.md "Layout transforms"). Megatron-LM partitioning: column parallel = output
// rows split, row parallel = input columns split; row-parallel biases are replicated and added once
// after all_reduce. The Hugging Face side of each tensor is the architecture's (model/arch/).
#include "model/tensor_plan.h"

#include <algorithm>

#include "format/error.h"
#include "model/arch/registry.h"
#include "model/tensor_names.h"

namespace tpshard {

namespace {

using Shape = std::vector<int64_t>;

}  // namespace

std::string canonical_name(TensorRole role, int layer) {
  switch (role) {
    case TensorRole::TokenEmbd: return names::kTokenEmbd;
    case TensorRole::PosEmbd: return names::kPosEmbd;
    case TensorRole::AttnNormWeight: return names::blk(layer, "attn_norm.weight");
    case TensorRole::AttnNormBias: return names::blk(layer, "attn_norm.bias");
    case TensorRole::AttnQkvWeight: return names::blk(layer, "attn_qkv.weight");
    case TensorRole::AttnQkvBias: return names::blk(layer, "attn_qkv.bias");
    case TensorRole::AttnQNormWeight: return names::blk(layer, "attn_q_norm.weight");
    case TensorRole::AttnKNormWeight: return names::blk(layer, "attn_k_norm.weight");
    case TensorRole::AttnOutputWeight: return names::blk(layer, "attn_output.weight");
    case TensorRole::AttnOutputBias: return names::blk(layer, "attn_output.bias");
    case TensorRole::FfnNormWeight: return names::blk(layer, "ffn_norm.weight");
    case TensorRole::FfnNormBias: return names::blk(layer, "ffn_norm.bias");
    case TensorRole::FfnGateUpWeight: return names::blk(layer, "ffn_gate_up.weight");
    case TensorRole::FfnGateUpBias: return names::blk(layer, "ffn_gate_up.bias");
    case TensorRole::FfnUpWeight: return names::blk(layer, "ffn_up.weight");
    case TensorRole::FfnUpBias: return names::blk(layer, "ffn_up.bias");
    case TensorRole::FfnDownWeight: return names::blk(layer, "ffn_down.weight");
    case TensorRole::FfnDownBias: return names::blk(layer, "ffn_down.bias");
    case TensorRole::OutputNormWeight: return names::kOutputNormWeight;
    case TensorRole::OutputNormBias: return names::kOutputNormBias;
    case TensorRole::Output: return names::kOutput;
    case TensorRole::OutputBias: return names::kOutputBias;
    case TensorRole::AttnPostNormWeight: return names::blk(layer, "attn_post_norm.weight");
    case TensorRole::FfnPostNormWeight: return names::blk(layer, "ffn_post_norm.weight");
    case TensorRole::FfnRouterWeight: return names::blk(layer, "ffn_router.weight");
    case TensorRole::FfnExpertsGateUpWeight: return names::blk(layer, "ffn_experts_gate_up.weight");
    case TensorRole::FfnExpertsDownWeight: return names::blk(layer, "ffn_experts_down.weight");
  }
  throw Error("tensor plan: unknown tensor role", "this is a bug");
}

SplitKind role_split(TensorRole role) {
  switch (role) {
    case TensorRole::TokenEmbd:
    case TensorRole::Output:
    case TensorRole::OutputBias: return SplitKind::Vocab;
    case TensorRole::AttnQkvWeight:
    case TensorRole::AttnQkvBias:
    case TensorRole::FfnGateUpWeight:
    case TensorRole::FfnGateUpBias:
    case TensorRole::FfnUpWeight:
    case TensorRole::FfnUpBias:
    case TensorRole::FfnExpertsGateUpWeight: return SplitKind::Column;
    case TensorRole::AttnOutputWeight:
    case TensorRole::FfnDownWeight:
    case TensorRole::FfnExpertsDownWeight: return SplitKind::Row;
    case TensorRole::PosEmbd:
    case TensorRole::AttnNormWeight:
    case TensorRole::AttnNormBias:
    case TensorRole::AttnQNormWeight:
    case TensorRole::AttnKNormWeight:
    case TensorRole::AttnOutputBias:
    case TensorRole::FfnNormWeight:
    case TensorRole::FfnNormBias:
    case TensorRole::FfnDownBias:
    case TensorRole::OutputNormWeight:
    case TensorRole::OutputNormBias:
    case TensorRole::AttnPostNormWeight:
    case TensorRole::FfnPostNormWeight:
    case TensorRole::FfnRouterWeight: return SplitKind::Replicated;
  }
  throw Error("tensor plan: unknown tensor role", "this is a bug");
}

bool is_layer_role(TensorRole role) {
  return !(role == TensorRole::TokenEmbd || role == TensorRole::PosEmbd || role == TensorRole::OutputNormWeight ||
           role == TensorRole::OutputNormBias || role == TensorRole::Output || role == TensorRole::OutputBias);
}

void add_tensor(std::vector<OutputTensor>& plan, TensorRole role, int layer, std::vector<std::string> sources,
                std::vector<Shape> source_shapes, Transform transform) {
  OutputTensor t;
  t.role = role;
  t.layer = is_layer_role(role) ? layer : -1;
  t.name = canonical_name(role, t.layer);
  t.sources = std::move(sources);
  t.source_shapes = std::move(source_shapes);
  t.split = role_split(role);
  t.transform = transform;
  plan.push_back(std::move(t));
}

std::vector<OutputTensor> plan_tensors(const ModelConfig& c) { return arch_spec(c.arch).plan_tensors(c); }

namespace {

/// slice_for_rank without the global shape.
RankSlice local_slice(const OutputTensor& t, const ModelConfig& c, const ParallelLayout& L, int r) {
  RankSlice s;
  const Shape& src = t.source_shapes.at(0);
  const bool one_d = src.size() == 1;
  const int64_t src_rows = src[0], src_cols = one_d ? 1 : src[1];
  const int64_t hd = c.head_dim;
  const TpRankRanges& mine = L.tp(r);
  const Range heads = mine.heads, kv = mine.kv_heads, mlp = mine.mlp_columns;
  int64_t local_rows = src_rows;
  s.local_cols = src_cols;
  switch (t.transform) {
    case Transform::Replicate:
      s.spans.push_back({0, 0, src_rows, 0});
      break;
    case Transform::RowsSplit: {
      local_rows = mlp.size();
      s.spans.push_back({0, mlp.begin, local_rows, 0});
      break;
    }
    case Transform::ColsSplit: {
      // Attention output: the rank's heads' columns; MLP down: its mlp_columns.
      const bool attention = t.role == TensorRole::AttnOutputWeight;
      const Range cols = attention ? Range{heads.begin * hd, heads.end * hd} : mlp;
      s.local_cols = cols.size();
      s.spans.push_back({0, 0, src_rows, cols.begin});
      break;
    }
    case Transform::VocabRows: {
      const Range rows = mine.vocab_rows;
      local_rows = rows.size();
      const int64_t begin = rows.begin, end = std::min<int64_t>(rows.end, c.vocab_size);
      if (end > begin) s.spans.push_back({0, begin, end - begin, 0});
      const int64_t pad = local_rows - std::max<int64_t>(end - begin, 0);
      if (pad > 0) s.spans.push_back({-1, 0, pad, 0});
      break;
    }
    case Transform::NeoxQkv: {
      // Source rows of head h: q at (3h+0)*hd, k at (3h+1)*hd, v at (3h+2)*hd (per-head interleave).
      for (int part = 0; part < 3; ++part)
        for (int64_t h = heads.begin; h < heads.end; ++h) s.spans.push_back({0, (3 * h + part) * hd, hd, 0});
      local_rows = 3 * heads.size() * hd;
      break;
    }
    case Transform::LlamaQkv: {
      s.spans.push_back({0, heads.begin * hd, heads.size() * hd, 0});
      s.spans.push_back({1, kv.begin * hd, kv.size() * hd, 0});
      s.spans.push_back({2, kv.begin * hd, kv.size() * hd, 0});
      local_rows = (heads.size() + 2 * kv.size()) * hd;
      break;
    }
    case Transform::GroupedQkv: {
      // KV group g holds rows [g (G + 2) hd, (g + 1) (G + 2) hd): its G = heads / kv_heads query heads
      // (query head h = g G + j at (g (G + 2) + j) hd), then its key head, then its value head.
      const int64_t G = c.num_attention_heads / c.num_key_value_heads, group_rows = (G + 2) * hd;
      for (int64_t h = heads.begin; h < heads.end;) {
        const int64_t g = h / G, end = std::min(heads.end, (g + 1) * G);  // the rank's heads of group g
        s.spans.push_back({0, g * group_rows + (h - g * G) * hd, (end - h) * hd, 0});
        h = end;
      }
      for (int64_t part = 0; part < 2; ++part)
        for (int64_t g = kv.begin; g < kv.end; ++g) s.spans.push_back({0, g * group_rows + (G + part) * hd, hd, 0});
      local_rows = (heads.size() + 2 * kv.size()) * hd;
      break;
    }
    case Transform::GateUp: {
      s.spans.push_back({0, mlp.begin, mlp.size(), 0});
      s.spans.push_back({1, mlp.begin, mlp.size(), 0});
      local_rows = 2 * mlp.size();
      break;
    }
    case Transform::PackedQkv: {
      const int64_t q_rows = c.num_attention_heads * hd, kv_rows = c.num_key_value_heads * hd;
      s.spans.push_back({0, heads.begin * hd, heads.size() * hd, 0});
      s.spans.push_back({0, q_rows + kv.begin * hd, kv.size() * hd, 0});
      s.spans.push_back({0, q_rows + kv_rows + kv.begin * hd, kv.size() * hd, 0});
      local_rows = (heads.size() + 2 * kv.size()) * hd;
      break;
    }
    case Transform::GptjQkv: {
      const int64_t half = c.rotary_ndims / 2;
      for (int source = 0; source < 2; ++source) {  // q_proj over the rank's heads, k_proj over its KV heads
        const Range r = source == 0 ? heads : kv;
        for (int64_t h = r.begin; h < r.end; ++h) {
          for (int64_t odd = 0; odd < 2; ++odd)
            for (int64_t j = 0; j < half; ++j) s.spans.push_back({source, h * hd + 2 * j + odd, 1, 0});
          if (hd > 2 * half) s.spans.push_back({source, h * hd + 2 * half, hd - 2 * half, 0});
        }
      }
      s.spans.push_back({2, kv.begin * hd, kv.size() * hd, 0});
      local_rows = (heads.size() + 2 * kv.size()) * hd;
      break;
    }
    case Transform::ExpertsGateUp: {
      const int experts = static_cast<int>(t.sources.size() / 2);
      for (int e = 0; e < experts; ++e) {
        s.spans.push_back({2 * e, mlp.begin, mlp.size(), 0});
        s.spans.push_back({2 * e + 1, mlp.begin, mlp.size(), 0});
      }
      local_rows = 2 * experts * mlp.size();
      break;
    }
    case Transform::ExpertsDown: {
      const int experts = static_cast<int>(t.sources.size());
      s.local_cols = mlp.size();
      for (int e = 0; e < experts; ++e) s.spans.push_back({e, 0, src_rows, mlp.begin});
      local_rows = experts * src_rows;
      break;
    }
    case Transform::PackedGateUp: {
      const int64_t I = c.intermediate_size;
      s.spans.push_back({0, mlp.begin, mlp.size(), 0});
      s.spans.push_back({0, I + mlp.begin, mlp.size(), 0});
      local_rows = 2 * mlp.size();
      break;
    }
  }
  if (one_d) {
    s.local_shape = {local_rows};
  } else {
    s.local_shape = {local_rows, s.local_cols};
  }
  s.split_axis = t.split == SplitKind::Replicated ? -1 : t.split == SplitKind::Row ? 1 : 0;
  return s;
}

}  // namespace

RankSlice slice_for_rank(const OutputTensor& t, const ModelConfig& c, const ParallelLayout& L, int r) {
  RankSlice s = local_slice(t, c, L, r);
  s.global_shape = s.local_shape;
  if (s.split_axis >= 0) {
    // The shard format records, along the split axis, the sum of every rank's extent (docs/FORMAT.md):
    // local * tp_size for an even split; replicated KV heads count once per rank holding them.
    const size_t axis = static_cast<size_t>(s.split_axis);
    int64_t total = 0;
    for (int q = 0; q < L.tp_size; ++q) total += q == r ? s.local_shape[axis] : local_slice(t, c, L, q).local_shape[axis];
    s.global_shape[axis] = total;
  }
  return s;
}

bool stage_holds(const OutputTensor& t, const ModelConfig& c, const ParallelLayout& L, int p) {
  TPS_CHECK(p >= 0 && p < L.pp_size, "pp_stage " + std::to_string(p) + " is outside pp_size " + std::to_string(L.pp_size),
            "this is a bug in the caller");
  const Range& layers = L.stage_layers[static_cast<size_t>(p)];
  if (t.layer >= 0) return t.layer >= layers.begin && t.layer < layers.end;
  return stage_holds_role(t.role, c, p == 0, p == L.pp_size - 1);
}

bool is_ignorable_source(const std::string& n, const ModelConfig& c) {
  if (ends_with(n, ".rotary_emb.inv_freq")) return true;
  if (c.tie_word_embeddings && (n == "lm_head.weight" || n == "embed_out.weight")) return true;
  return arch_spec(c.arch).is_ignorable_source(n);
}

}  // namespace tpshard
