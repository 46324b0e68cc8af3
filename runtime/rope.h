// rope.h: rotary position embedding frequencies, computed on the host for every backend.
// Formulas follow transformers' modeling_rope_utils.py: _compute_default_rope_parameters,
// _compute_linear_scaling_rope_parameters, _compute_llama3_parameters and _compute_yarn_parameters (all
// in float32, like torch).
#pragma once
#include <vector>

#include "model/model_config.h"

namespace tpshard {

/// inv_freq[i] for i in [0, rotary_ndims / 2): 1 / rope_theta^(2i / rotary_ndims), then scaled per
/// rope_type (Linear: / factor; Llama3: wavelength-dependent smoothing; Yarn: ramp between
/// extrapolation and interpolation by factor; LongRope: 1 / (short_factor[i] * rope_theta^(2i / rotary_ndims))).
/// f32, like transformers.
/// Empty with learned positions (PositionKind::Learned: no rotary). Throws Error when rotary_ndims is odd or not in (0, head_dim].
std::vector<float> rope_inv_freq(const ModelConfig& c);

/// RopeType::Dynamic (transformers' _compute_dynamic_ntk_parameters, as dynamic_rope_update calls it
/// with seq_len = the largest position + 1): the default frequencies with the base
/// rope_theta * (factor * L / max_position_embeddings - (factor - 1))^(d / (d - 2)), L = max(seq_len,
/// max_position_embeddings), d = rotary_ndims; the scaling in f32 like torch's tensor path. Equal to
/// rope_inv_freq(c) for seq_len <= max_position_embeddings, the only lengths a session runs.
std::vector<float> rope_dynamic_ntk_inv_freq(const ModelConfig& c, int64_t seq_len);

/// Apply HF rotate_half rotary in place to one head vector x[head_dim] at position pos:
/// for i < d/2 (d = 2 * inv_freq.size()): a = x[i], b = x[i + d/2], angle = pos * inv_freq[i] (f32),
/// x[i] = a cos - b sin, x[i + d/2] = b cos + a sin. Dims >= d are unchanged (partial rotary).
/// cos and sin are multiplied by attention_factor first (ModelConfig::rope_attention_factor; transformers'
/// attention_scaling: emb.cos() * attention_scaling).
void apply_rotary(float* x, int pos, const std::vector<float>& inv_freq, float attention_factor = 1.0f);

}  // namespace tpshard
