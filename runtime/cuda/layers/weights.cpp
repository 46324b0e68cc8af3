// weights.cpp: bind the WeightArena's tensors to the named views of weights.h, with shape checks.
#include "runtime/cuda/layers/weights.h"

#include <sstream>

#include "format/error.h"
#include "format/tensor_names.h"

namespace tpshard::cuda {
namespace {

std::string shape_str(const std::vector<int64_t>& s) {
  std::ostringstream o;
  o << "[";
  for (size_t i = 0; i < s.size(); ++i) o << (i ? ", " : "") << s[i];
  o << "]";
  return o.str();
}

struct Binder {
  const WeightArena& arena;
  DType dtype;
  bool first = true;

  const void* get(const std::string& name, const std::vector<int64_t>& shape, bool optional = false) {
    const void* p = arena.find(name);
    if (!p) {
      if (optional) return nullptr;
      arena.at(name);  // throws Error naming the tensor and the shard file
    }
    const TensorRecord& r = arena.record(name);
    if (r.local_shape != shape)
      throw Error("cuda weights: tensor " + name + " has shape " + shape_str(r.local_shape) + ", expected " +
                      shape_str(shape),
                  "the shard does not match its manifest config; re-run tpshard convert");
    if (first) {
      dtype = r.dtype;
      first = false;
    } else if (r.dtype != dtype) {
      throw Error("cuda weights: tensor " + name + " is " + dtype_name(r.dtype) + " but the other weights are " +
                      dtype_name(dtype),
                  "the CUDA backend needs one dtype for all weights; convert with --dtype f16, bf16 or f32");
    }
    return p;
  }
};

}  // namespace

ModelWeights bind_weights(const WeightArena& arena, const ModelConfig& c, const TpLayout& layout) {
  const int64_t H = c.hidden_size, hd = c.head_dim;
  const int64_t q_rows = layout.num_heads_per_rank * hd;
  const int64_t qkv_rows = q_rows + 2 * layout.num_kv_heads_per_rank * hd;
  const int64_t ipr = layout.intermediate_size_per_rank;
  const bool ln = c.norm == NormKind::LayerNorm;
  Binder b{arena, DType::F16};
  ModelWeights w;
  w.token_embd = b.get(names::kTokenEmbd, {layout.vocab_size_per_rank, H});
  for (int i = 0; i < c.num_hidden_layers; ++i) {
    auto n = [&](const char* s) { return names::blk(i, s); };
    LayerWeights l;
    l.attn_norm_weight = b.get(n("attn_norm.weight"), {H});
    if (ln) l.attn_norm_bias = b.get(n("attn_norm.bias"), {H});
    l.attn_qkv_weight = b.get(n("attn_qkv.weight"), {qkv_rows, H});
    l.attn_qkv_bias = b.get(n("attn_qkv.bias"), {qkv_rows}, !c.attention_bias);
    l.attn_output_weight = b.get(n("attn_output.weight"), {H, q_rows});
    l.attn_output_bias = b.get(n("attn_output.bias"), {H}, !c.attention_out_bias);
    l.ffn_norm_weight = b.get(n("ffn_norm.weight"), {H});
    if (ln) l.ffn_norm_bias = b.get(n("ffn_norm.bias"), {H});
    if (c.gated_mlp) {
      l.ffn_up_weight = b.get(n("ffn_gate_up.weight"), {2 * ipr, H});
      l.ffn_up_bias = b.get(n("ffn_gate_up.bias"), {2 * ipr}, true);
    } else {
      l.ffn_up_weight = b.get(n("ffn_up.weight"), {ipr, H});
      l.ffn_up_bias = b.get(n("ffn_up.bias"), {ipr}, !c.mlp_bias);
    }
    l.ffn_down_weight = b.get(n("ffn_down.weight"), {H, ipr});
    l.ffn_down_bias = b.get(n("ffn_down.bias"), {H}, !c.mlp_bias);
    w.layers.push_back(l);
  }
  w.output_norm_weight = b.get(names::kOutputNormWeight, {H});
  if (ln) w.output_norm_bias = b.get(names::kOutputNormBias, {H});
  w.output = c.tie_word_embeddings ? w.token_embd : b.get(names::kOutput, {layout.vocab_size_per_rank, H});
  w.dtype = b.dtype;
  return w;
}

}  // namespace tpshard::cuda
