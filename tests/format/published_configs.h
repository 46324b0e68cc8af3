// published_configs.h: config.json fields written out (not committed as files) of three published models:
// google/gemma-2-9b (Gemma's terms keep its files out of the repository), allenai/OLMo-2-1124-7B (the
// values of its published config.json, as NVIDIA Megatron-Bridge's OLMo 2 tests mirror them; the file itself
// was not reachable to copy) and bigcode/starcoder2-3b (under the BigCode OpenRAIL-M licence, whose use
// terms travel with the model's files: its fields are written out here instead). Used by
// test_gemma2_config.cpp, test_olmo2_mixtral_config.cpp and test_real_configs.cpp.
#pragma once
#include <nlohmann/json.hpp>

namespace tpshard::test {

/// google/gemma-2-9b: hidden 3584, 42 layers, 16 heads of 256, 8 KV heads, intermediate 14336, vocab
/// 256000, query_pre_attn_scalar 256, sliding_window 4096, soft-caps 50 / 30, no layer_types (the
/// config class derives them), both hidden_act and hidden_activation.
inline nlohmann::json gemma2_9b() {
  return nlohmann::json::parse(R"({
    "architectures": ["Gemma2ForCausalLM"], "model_type": "gemma2", "attention_bias": false,
    "attention_dropout": 0.0, "attn_logit_softcapping": 50.0, "bos_token_id": 2,
    "cache_implementation": "hybrid", "eos_token_id": 1, "final_logit_softcapping": 30.0, "head_dim": 256,
    "hidden_act": "gelu_pytorch_tanh", "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 3584,
    "initializer_range": 0.02, "intermediate_size": 14336, "max_position_embeddings": 8192,
    "num_attention_heads": 16, "num_hidden_layers": 42, "num_key_value_heads": 8, "pad_token_id": 0,
    "query_pre_attn_scalar": 256, "rms_norm_eps": 1e-06, "rope_theta": 10000.0, "sliding_window": 4096,
    "torch_dtype": "float32", "use_cache": true, "vocab_size": 256000})");
}

/// allenai/OLMo-2-1124-7B: hidden 4096, 32 layers, 32 heads (MHA), intermediate 11008, vocab 100352,
/// rope_theta 5e5, rms_norm_eps 1e-6, untied, no bos.
inline nlohmann::json olmo2_7b() {
  return nlohmann::json::parse(R"({
    "architectures": ["Olmo2ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
    "eos_token_id": 100257, "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02,
    "intermediate_size": 11008, "max_position_embeddings": 4096, "model_type": "olmo2",
    "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 32, "pad_token_id": 100277,
    "rms_norm_eps": 1e-06, "rope_theta": 500000.0, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
    "use_cache": true, "vocab_size": 100352})");
}

/// bigcode/starcoder2-3b, config.json at revision 733247c55e3f73af49ce8e9c7949bf14af205928 (every field, as
/// pinned by the public copy in AshishKumar4/dew, tests/fixtures/hf/starcoder2-3b, commit
/// 778e661222f2a63c3f95d6ea293b856f1010e73a): hidden 3072, 30 layers, 24 heads / 2 KV heads, intermediate
/// 12288, vocab 49152, sliding_window 4096 on every layer, LayerNorm with biases, use_bias, no
/// tie_word_embeddings field (Starcoder2Config's default: tied), no torch_dtype.
inline nlohmann::json starcoder2_3b() {
  return nlohmann::json::parse(R"({
    "architectures": ["Starcoder2ForCausalLM"], "attention_dropout": 0.1, "residual_dropout": 0.1,
    "embedding_dropout": 0.1, "bos_token_id": 0, "eos_token_id": 0, "hidden_act": "gelu_pytorch_tanh",
    "hidden_size": 3072, "initializer_range": 0.018042, "intermediate_size": 12288,
    "max_position_embeddings": 16384, "mlp_type": "default", "model_type": "starcoder2", "norm_epsilon": 1e-05,
    "norm_type": "layer_norm", "num_attention_heads": 24, "num_hidden_layers": 30, "num_key_value_heads": 2,
    "rope_theta": 999999.4420358813, "sliding_window": 4096, "transformers_version": "4.37.0.dev0",
    "use_bias": true, "use_cache": true, "vocab_size": 49152})");
}

}  // namespace tpshard::test
