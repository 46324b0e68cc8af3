// cpu_weights.cpp: load a rank's shard into f32 vectors with shape checks against the config.
#include "runtime/cpu/cpu_weights.h"

#include <sstream>

#include "format/error.h"
#include "format/tensor_names.h"

namespace tpshard::cpu {

namespace {

std::string shape_str(const std::vector<int64_t>& s) {
  std::ostringstream o;
  o << "[";
  for (size_t i = 0; i < s.size(); ++i) o << (i ? ", " : "") << s[i];
  o << "]";
  return o.str();
}

struct Loader {
  const ShardReader& shard;
  bool verify;
  uint64_t bytes = 0;

  /// Required unless `optional`; absent optional tensors give an empty vector.
  std::vector<float> get(const std::string& name, const std::vector<int64_t>& shape, bool optional = false) {
    const TensorRecord* rec = shard.find(name);
    if (!rec) {
      if (optional) return {};
      throw Error(shard.path() + ": tensor " + name + " is missing",
                  "the shard does not match its manifest config; re-run tpshard convert");
    }
    if (rec->local_shape != shape)
      throw Error(shard.path() + ": tensor " + name + " has shape " + shape_str(rec->local_shape) + ", expected " +
                      shape_str(shape),
                  "the shard does not match its manifest config; re-run tpshard convert");
    std::vector<float> v = shard.read_tensor_f32(name, verify);
    bytes += v.size() * sizeof(float);
    return v;
  }
};

}  // namespace

ModelWeights load_weights(const ShardReader& shard, const ModelConfig& c, const TpLayout& layout, bool verify) {
  const int64_t H = c.hidden_size, hd = c.head_dim;
  const int64_t q_rows = layout.num_heads_per_rank * hd;
  const int64_t qkv_rows = q_rows + 2 * layout.num_kv_heads_per_rank * hd;
  const int64_t ipr = layout.intermediate_size_per_rank;
  const bool layer_norm = c.norm == NormKind::LayerNorm;
  Loader L{shard, verify};
  ModelWeights w;
  w.token_embd = L.get(names::kTokenEmbd, {layout.vocab_size_per_rank, H});
  for (int i = 0; i < c.num_hidden_layers; ++i) {
    auto n = [&](const char* s) { return names::blk(i, s); };
    LayerWeights lw;
    lw.attn_norm_weight = L.get(n("attn_norm.weight"), {H});
    if (layer_norm) lw.attn_norm_bias = L.get(n("attn_norm.bias"), {H});
    lw.attn_qkv_weight = L.get(n("attn_qkv.weight"), {qkv_rows, H});
    lw.attn_qkv_bias = L.get(n("attn_qkv.bias"), {qkv_rows}, !c.attention_bias);
    lw.attn_output_weight = L.get(n("attn_output.weight"), {H, q_rows});
    lw.attn_output_bias = L.get(n("attn_output.bias"), {H}, !c.attention_out_bias);
    lw.ffn_norm_weight = L.get(n("ffn_norm.weight"), {H});
    if (layer_norm) lw.ffn_norm_bias = L.get(n("ffn_norm.bias"), {H});
    if (c.gated_mlp) {
      lw.ffn_gate_up_weight = L.get(n("ffn_gate_up.weight"), {2 * ipr, H});
      lw.ffn_gate_up_bias = L.get(n("ffn_gate_up.bias"), {2 * ipr}, true);
    } else {
      lw.ffn_up_weight = L.get(n("ffn_up.weight"), {ipr, H});
      lw.ffn_up_bias = L.get(n("ffn_up.bias"), {ipr}, !c.mlp_bias);
    }
    lw.ffn_down_weight = L.get(n("ffn_down.weight"), {H, ipr});
    lw.ffn_down_bias = L.get(n("ffn_down.bias"), {H}, !c.mlp_bias);
    w.layers.push_back(std::move(lw));
  }
  w.output_norm_weight = L.get(names::kOutputNormWeight, {H});
  if (layer_norm) w.output_norm_bias = L.get(names::kOutputNormBias, {H});
  if (!c.tie_word_embeddings) w.output = L.get(names::kOutput, {layout.vocab_size_per_rank, H});
  w.bytes = L.bytes;
  return w;
}

}  // namespace tpshard::cpu
