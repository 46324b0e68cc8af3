// mixtral.cpp: MixtralForCausalLM (Mixtral 8x7B, 8x22B). transformers' modeling_mixtral.py: the Llama
// block (RMSNorm, GQA attention, full rotary, sliding_window on every layer when set, as Mistral) whose MLP
// is a sparse mixture of experts: the router block_sparse_moe.gate [num_local_experts, hidden] scores each
// token, softmax over the experts, the num_experts_per_tok highest taken and renormalized to sum 1
// (MixtralTopKRouter); expert e is a gated silu MLP, w1 (gate) and w3 (up) [intermediate, hidden], w2
// (down) [hidden, intermediate]; the token's output is the weighted sum of its experts' outputs.
// Tensor parallelism: the router is replicated; every expert's MLP is split like a dense MLP (the rank's
// mlp_columns of each expert's w1 / w3 rows and w2 columns), so one all_reduce per layer sums all experts.
#include "format/error.h"
#include "model/arch/llama_family.h"
#include "model/arch/registry.h"
#include "model/config_fields.h"

namespace tpshard {

namespace {

using namespace config_fields;

/// The most experts per layer accepted (published MoE models have at most a few hundred).
constexpr int64_t kMaxExperts = 1024;

/// MixtralConfig defaults (configuration_mixtral.py): intermediate_size 14336, rms_norm_eps 1e-5,
/// hidden_act silu, rope_theta 1e6, sliding_window None, num_local_experts 8, num_experts_per_tok 2;
/// no biases. Throws Error naming path for expert counts outside 1..kMaxExperts or a top-k above them.
double parse(const nlohmann::json& j, ModelConfig& c, const std::string& path) {
  c.intermediate_size = opt_int(j, "intermediate_size", 14336, path);
  c.norm = NormKind::RmsNorm;
  c.norm_eps = opt_num(j, "rms_norm_eps", 1e-5, path);
  c.hidden_act = opt_act(j, "hidden_act", "silu", path);
  c.gated_mlp = true;
  c.use_parallel_residual = false;
  c.rope_theta = opt_num(j, "rope_theta", 1000000.0, path);
  c.attention_bias = c.attention_out_bias = c.mlp_bias = false;
  c.num_local_experts = opt_int(j, "num_local_experts", 8, path);
  c.num_experts_per_tok = opt_int(j, "num_experts_per_tok", 2, path);
  if (c.num_local_experts < 1 || c.num_local_experts > kMaxExperts)
    throw Error(path + ": num_local_experts " + std::to_string(c.num_local_experts) + " is outside 1.." +
                    std::to_string(kMaxExperts), "fix config.json");
  if (c.num_experts_per_tok < 1 || c.num_experts_per_tok > c.num_local_experts)
    throw Error(path + ": num_experts_per_tok " + std::to_string(c.num_experts_per_tok) + " is outside 1..num_local_experts " +
                    std::to_string(c.num_local_experts), "fix config.json");
  llama_family::set_sliding_window(c, opt_int(j, "sliding_window", 0, path),
                                   std::vector<bool>(static_cast<size_t>(c.num_hidden_layers), true));
  return opt_num(j, "partial_rotary_factor", 1.0, path);
}

std::vector<OutputTensor> plan(const ModelConfig& c) {
  const int64_t H = c.hidden_size, I = c.intermediate_size, V = c.vocab_size, E = c.num_local_experts;
  using R = TensorRole;
  using T = Transform;
  std::vector<OutputTensor> v;
  add_tensor(v, R::TokenEmbd, -1, {"model.embed_tokens.weight"}, {{V, H}}, T::VocabRows);
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    const std::string a = p + "self_attn.", m = p + "block_sparse_moe.";
    add_tensor(v, R::AttnNormWeight, l, {p + "input_layernorm.weight"}, {{H}}, T::Replicate);
    llama_family::add_qkv_projections(v, c, l, a);
    llama_family::add_output_projection(v, c, l, a);
    add_tensor(v, R::FfnNormWeight, l, {p + "post_attention_layernorm.weight"}, {{H}}, T::Replicate);
    add_tensor(v, R::FfnRouterWeight, l, {m + "gate.weight"}, {{E, H}}, T::Replicate);
    std::vector<std::string> gate_up, down;
    std::vector<std::vector<int64_t>> gate_up_shapes, down_shapes;
    for (int64_t e = 0; e < E; ++e) {
      const std::string x = m + "experts." + std::to_string(e) + ".";
      gate_up.insert(gate_up.end(), {x + "w1.weight", x + "w3.weight"});
      gate_up_shapes.insert(gate_up_shapes.end(), {{I, H}, {I, H}});
      down.push_back(x + "w2.weight");
      down_shapes.push_back({H, I});
    }
    add_tensor(v, R::FfnExpertsGateUpWeight, l, gate_up, gate_up_shapes, T::ExpertsGateUp);
    add_tensor(v, R::FfnExpertsDownWeight, l, down, down_shapes, T::ExpertsDown);
  }
  add_tensor(v, R::OutputNormWeight, -1, {"model.norm.weight"}, {{H}}, T::Replicate);
  if (!c.tie_word_embeddings) add_tensor(v, R::Output, -1, {"lm_head.weight"}, {{V, H}}, T::VocabRows);
  return v;
}

}  // namespace

const ArchSpec kMixtralArch{Arch::Mixtral, "MixtralForCausalLM", "mixtral", parse, plan, llama_family::no_ignorable};

}  // namespace tpshard
