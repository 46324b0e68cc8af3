// model_config.h: the model hyperparameters the converter and runtime need, normalized from a
// Hugging Face config.json of any transformers version. Field names follow config.json.
// Owns: parsing and validation of config.json's common fields (the architecture-specific ones are
// parsed by the architecture's file, model/arch/); ModelConfig <-> manifest JSON.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace tpshard {

/// One value per architecture of the registry (model/arch/registry.h); config.json's architectures[0]
/// names it (GPTNeoXForCausalLM, LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM,
/// InternLM2ForCausalLM, GPTNeoForCausalLM, Phi3ForCausalLM, Qwen3ForCausalLM, Starcoder2ForCausalLM,
/// GPTJForCausalLM, FalconForCausalLM, Gemma2ForCausalLM, Olmo2ForCausalLM, MixtralForCausalLM).
enum class Arch { GptNeoX, Llama, Mistral, Qwen2, InternLM2, GptNeo, Phi3, Qwen3, Starcoder2, GptJ, Falcon, Gemma2, Olmo2, Mixtral };
enum class NormKind { LayerNorm, RmsNorm };    ///< GPT-NeoX: LayerNorm with bias; Llama: RMSNorm (no bias)
enum class Activation { Gelu, GeluTanh, Silu, Relu };  ///< "gelu" (erf); "gelu_new"/"gelu_fast"/"gelu_pytorch_tanh"; "silu"; "relu"
/// rope_scaling type; any other type is an error. Dynamic (NTK-aware, transformers'
/// _compute_dynamic_ntk_parameters) equals Default for sequences within max_position_embeddings, the
/// only lengths a session runs (session_types.h refuses a longer max_seq_len); rope_dynamic_ntk_inv_freq
/// (runtime/rope.h) gives the frequencies past it. Yarn: transformers' _compute_yarn_parameters (blended
/// frequencies, and cos / sin multiplied by rope_attention_factor). LongRope (Phi-3 128k / Phi-3.5, "longrope"
/// or the older "su"): transformers' _compute_longrope_parameters with the short factors, the ones it uses
/// while a sequence stays within original_max_position_embeddings; a session runs only that many positions
/// (model_position_limit).
enum class RopeType { Default, Linear, Llama3, Dynamic, Yarn, LongRope };
/// How positions enter the model: rotary on Q/K (GPT-NeoX, Llama), or a learned absolute position
/// embedding table added to the token embeddings (GPT-Neo: wpe; no rotary at all, rotary_ndims 0).
enum class PositionKind { Rotary, Learned };

/// Normalized model configuration. Shapes are global (not per rank).
struct ModelConfig {
  Arch arch = Arch::Llama;          ///< the registry entry that parsed the config and plans its tensors
  std::string architecture;         ///< the config's architectures[0], e.g. "GPTNeoXForCausalLM"
  std::string model_type;           ///< "gpt_neox", "llama", "mistral", "qwen2", "internlm2"
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;  ///< == num_attention_heads when the config has none (MHA)
  int64_t head_dim = 0;             ///< hidden_size / num_attention_heads unless the config gives head_dim
  int64_t vocab_size = 0;           ///< unpadded
  int64_t max_position_embeddings = 0;
  NormKind norm = NormKind::RmsNorm;
  double norm_eps = 1e-5;           ///< layer_norm_eps (GPT-NeoX) or rms_norm_eps (Llama)
  Activation hidden_act = Activation::Silu;
  bool gated_mlp = true;            ///< Llama: down(act(gate(x)) * up(x)); GPT-NeoX: down(act(up(x)))
  bool use_parallel_residual = false;  ///< GPT-NeoX: x + attn(ln1(x)) + mlp(ln2(x))
  /// Parallel residual whose two branches read one norm (Falcon-7B's input_layernorm): the checkpoint holds
  /// one norm tensor per layer, planned into both norm roles. Falcon only (GPT-J's plan names its ln_1 twice
  /// itself); written to the manifest only when true.
  bool shared_parallel_norm = false;
  PositionKind position_embedding = PositionKind::Rotary;  ///< manifest "position_embedding": "rotary" / "learned"
  int64_t rotary_ndims = 0;         ///< 0 with learned positions; else leading dims of each head that rotate: head_dim * rotary_pct (partial_rotary_factor)
  double rope_theta = 10000.0;      ///< rotary_emb_base (GPT-NeoX) / rope_theta / rope_parameters.rope_theta
  RopeType rope_type = RopeType::Default;
  double rope_factor = 1.0;                       ///< rope_scaling.factor (Linear, Llama3, Dynamic, Yarn)
  double rope_low_freq_factor = 1.0;              ///< Llama3 only
  double rope_high_freq_factor = 4.0;             ///< Llama3 only
  /// Llama3 (default 8192) and Yarn (default: a top-level original_max_position_embeddings, else
  /// max_position_embeddings, as transformers' standardize_rope_params sets it)
  int64_t rope_original_max_position_embeddings = 8192;
  double rope_beta_fast = 32.0;                   ///< Yarn only: rope_scaling.beta_fast (32 when absent or 0)
  double rope_beta_slow = 1.0;                    ///< Yarn only: rope_scaling.beta_slow (1 when absent or 0)
  bool rope_truncate = true;                      ///< Yarn only: rope_scaling.truncate (floor / ceil the correction range)
  /// cos and sin are multiplied by this (transformers' attention_scaling). Yarn: rope_scaling.attention_factor,
  /// else from factor (0.1 ln(factor) + 1) or mscale / mscale_all_dim; 1 for every other rope type.
  /// Manifest "rope_attention_factor" (absent in older manifests: 1).
  double rope_attention_factor = 1.0;
  /// LongRope only: rope_scaling.short_factor / long_factor, rotary_ndims / 2 positive numbers each; inv_freq[i]
  /// is divided by short_factor[i]. long_factor is kept (manifest, identity) but not used: transformers switches to
  /// it only past original_max_position_embeddings, which no session reaches.
  std::vector<double> rope_short_factor, rope_long_factor;
  bool attention_bias = false;      ///< q/k/v projections have a bias (GPT-NeoX: always; Qwen2: true)
  bool attention_out_bias = false;  ///< attention output projection has a bias (GPT-NeoX: true)
  bool mlp_bias = false;            ///< MLP projections have biases (GPT-NeoX: true)
  /// RMSNorm of each Q and K head over head_dim (weights blk.N.attn_q_norm / attn_k_norm, eps norm_eps)
  /// after the projection, before rotary (Qwen3).
  bool qk_norm = false;
  /// RMSNorm of the whole Q projection (num_attention_heads * head_dim) and of the whole K projection
  /// (num_key_value_heads * head_dim), weights blk.N.attn_q_norm / attn_k_norm of those sizes, eps
  /// norm_eps, after the projection, before rotary (OLMo 2: modeling_olmo2.py Olmo2Attention). At
  /// tp_size > 1 a rank holds only its heads: the sum of squares of each token's row is all_reduced
  /// (runtime/qk_norm_rows.h). Manifest "qk_norm_across_heads", written when true.
  bool qk_norm_across_heads = false;
  bool tie_word_embeddings = false; ///< lm_head shares token_embd
  /// Mistral / Qwen2 sliding_window when some layer uses it (0 = none, also when it is at least
  /// max_position_embeddings); the layers that do carry it in layer_windows, which is what the backends read.
  int64_t sliding_window = 0;
  /// Per-layer local attention window: layer l's query at position p attends to keys
  /// p - layer_windows[l] < j <= p; 0 = global (causal over all positions). Empty = every layer global.
  /// GPT-Neo: attention_types / window_size; Mistral: sliding_window on every layer; Qwen2 with
  /// use_sliding_window: sliding_window on the layers of layer_types "sliding_attention" (without
  /// layer_types: the layers l >= max_window_layers). transformers' local mask for GPT-Neo and its
  /// sliding_window_overlay (masking_utils.py: kv_idx > q_idx - sliding_window) are the same rule.
  std::vector<int64_t> layer_windows;
  double attention_scale = 0.0;     ///< score multiplier q.k * scale; 0 = 1/sqrt(head_dim) (GPT-Neo: 1, unscaled)
  /// Attention score soft-cap: s <- cap * tanh(s / cap) on the scaled scores, before the causal / window
  /// mask and the softmax (Gemma 2 attn_logit_softcapping, modeling_gemma2.py eager_attention_forward);
  /// 0 = none. Manifest "attn_logit_softcapping".
  double attn_logit_softcapping = 0.0;
  /// Final logit soft-cap: logits <- cap * tanh(logits / cap) before argmax / sampling (Gemma 2
  /// final_logit_softcapping, Gemma2ForCausalLM.forward); 0 = none. Manifest "final_logit_softcapping".
  double final_logit_softcapping = 0.0;
  /// Sandwich norms (Gemma 2): the attention output and the MLP output are each RMS-normalized (roles
  /// AttnPostNormWeight / FfnPostNormWeight, post_attention_layernorm / post_feedforward_layernorm)
  /// before their residual add. Manifest "post_norms".
  bool post_norms = false;
  /// The attention and the MLP read the residual stream through a norm (attn_norm / ffn_norm). False for
  /// OLMo 2, whose blocks normalize only their outputs (post_norms): x + norm(attn(x)), then
  /// h + norm(mlp(h)). Manifest "pre_norms", written when false.
  bool pre_norms = true;
  /// Mixture of experts (Mixtral): the MLP of every layer is num_local_experts gated MLPs of
  /// intermediate_size columns each (each split over tp ranks like a dense MLP: mlp_columns) and a
  /// router [num_local_experts, hidden]; each token takes the num_experts_per_tok experts of highest
  /// softmax(router x), weighted by those probabilities renormalized to sum 1 (modeling_mixtral.py
  /// MixtralTopKRouter). 0 = a dense MLP. Manifest "num_local_experts" / "num_experts_per_tok", written
  /// when num_local_experts > 0.
  int64_t num_local_experts = 0;
  int64_t num_experts_per_tok = 0;
  /// Every RMSNorm multiplies by (norm_weight_offset + w) instead of w: 1 for Gemma (Gemma2RMSNorm:
  /// x * (1 + weight), in f32), 0 otherwise. Manifest "norm_weight_offset".
  double norm_weight_offset = 0.0;
  /// The token embeddings are multiplied by this before the first layer (Gemma 2: sqrt(hidden_size),
  /// rounded to the activation dtype as transformers' Gemma2TextScaledWordEmbedding casts it); 1 = none.
  /// Manifest "embedding_scale".
  double embedding_scale = 1.0;
  std::string torch_dtype;          ///< "float16" / "bfloat16" / "float32" from torch_dtype or dtype; may be empty
  std::vector<int64_t> bos_token_ids;  ///< from config / generation_config (may be empty)
  std::vector<int64_t> eos_token_ids;  ///< all EOS ids (eos_token_id can be an int or a list)
  /// The outer architecture (e.g. "NVLM_D") when config.json nests this language model's config in a
  /// multimodal one (model/multimodal.h); empty otherwise. The converter then maps the checkpoint's
  /// tensor names to the language model's; not stored in the manifest (a converted model is the LM).
  std::string multimodal_architecture;
};

/// The most layers a config may declare (published models have at most a few hundred): bounds every
/// per-layer table before it is built.
constexpr int64_t kMaxHiddenLayers = 4096;
/// The largest hidden_size, intermediate_size, heads, head_dim, vocab_size and heads x head_dim accepted
/// (2^24): shapes and byte counts built from a few of them then fit int64.
constexpr int64_t kMaxDimension = int64_t{1} << 24;

/// Parse a Hugging Face config.json object. `path` is only used in error messages.
/// Reads old and new field spellings (rotary_pct / partial_rotary_factor, rotary_emb_base / rope_theta /
/// rope_parameters, torch_dtype / dtype, rope_scaling.type / rope_type).
/// A multimodal config whose architecture is not in the registry but which nests a supported language
/// model's config (llm_config / text_config, model/multimodal.h) parses as that language model.
/// Throws Error for: unsupported architecture (message lists the supported ones), a missing required field
/// (named), an unknown rope type, an unknown hidden_act.
ModelConfig parse_hf_config(const nlohmann::json& config, const std::string& path);

/// Read and parse HF_DIR/config.json (and generation_config.json, when present, for bos/eos ids).
ModelConfig load_hf_config(const std::string& hf_dir);
/// One config.json file by its path (any name; generation_config.json is not read). Errors as load_hf_config.
ModelConfig load_hf_config_file(const std::string& path);
/// What a directory without config.json holds instead, as a hint: a llama2.c checkpoint (a *.bin next to
/// a tok*.bin tokenizer) names the import script, GGUF files say they are not a source tpshard converts;
/// otherwise a general "check that the directory is a Hugging Face model directory".
std::string missing_config_hint(const std::string& hf_dir);

/// The most positions a sequence of this model may take: max_position_embeddings (0 when unset), or for
/// LongRope original_max_position_embeddings, past which transformers changes the rotary factors.
int64_t model_position_limit(const ModelConfig& c);

/// The normalized config as stored in manifest.json under "model" (HF field names, plus "arch").
nlohmann::json model_config_to_json(const ModelConfig& c);
ModelConfig model_config_from_json(const nlohmann::json& j, const std::string& path);

}  // namespace tpshard
