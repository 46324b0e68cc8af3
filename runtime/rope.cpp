// rope.cpp: rotary frequencies (transformers' modeling_rope_utils.py formulas) and rotate_half.
#include "runtime/rope.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "format/error.h"

namespace tpshard {

std::vector<float> rope_inv_freq(const ModelConfig& c) {
  if (c.position_embedding == PositionKind::Learned) return {};  // no rotary
  const int64_t dim = c.rotary_ndims;
  TPS_CHECK(dim > 0 && dim <= c.head_dim && dim % 2 == 0,
            "model config: rotary_ndims " + std::to_string(dim) + " must be even and in (0, head_dim=" +
                std::to_string(c.head_dim) + "]",
            "check rotary_pct / partial_rotary_factor in config.json and re-run tpshard convert");
  std::vector<float> inv(static_cast<size_t>(dim / 2));
  const float base = static_cast<float>(c.rope_theta);
  for (int64_t i = 0; i < dim / 2; ++i) {
    // torch: 1.0 / (base ** (arange(0, dim, 2).float() / dim)), all f32.
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(dim);
    inv[i] = 1.0f / std::pow(base, exponent);
  }
  if (c.rope_type == RopeType::LongRope) {
    // _compute_longrope_parameters: 1 / (ext_factors * base ** (arange(0, dim, 2) / dim)), f32, with the
    // short factors (the sequence stays within original_max_position_embeddings)
    TPS_CHECK(c.rope_short_factor.size() == inv.size(),
              "model config: longrope has " + std::to_string(c.rope_short_factor.size()) + " short factors for " +
                  std::to_string(inv.size()) + " rotary frequencies",
              "re-run tpshard convert");
    for (size_t i = 0; i < inv.size(); ++i) {
      const float exponent = static_cast<float>(2 * i) / static_cast<float>(dim);
      inv[i] = 1.0f / (static_cast<float>(c.rope_short_factor[i]) * std::pow(base, exponent));
    }
  } else if (c.rope_type == RopeType::Linear) {
    for (float& f : inv) f = f / static_cast<float>(c.rope_factor);
  } else if (c.rope_type == RopeType::Llama3) {
    const float factor = static_cast<float>(c.rope_factor);
    const float low = static_cast<float>(c.rope_low_freq_factor);
    const float high = static_cast<float>(c.rope_high_freq_factor);
    const float old_len = static_cast<float>(c.rope_original_max_position_embeddings);
    const float low_freq_wavelen = old_len / low;
    const float high_freq_wavelen = old_len / high;
    for (float& f : inv) {
      const float wavelen = 2.0f * static_cast<float>(M_PI) / f;
      float scaled = wavelen > low_freq_wavelen ? f / factor : f;  // low frequencies: divided by factor
      const bool medium = !(wavelen < high_freq_wavelen) && !(wavelen > low_freq_wavelen);
      if (medium) {
        const float smooth = (old_len / wavelen - low) / (high - low);
        scaled = (1.0f - smooth) * scaled / factor + smooth * scaled;
      }
      f = scaled;
    }
  } else if (c.rope_type == RopeType::Yarn) {
    // _compute_yarn_parameters: blend of the extrapolated (default) and interpolated (/ factor)
    // frequencies by a linear ramp between the correction dims of beta_fast and beta_slow rotations
    // over original_max_position_embeddings (those bounds in double, like Python's math; the rest f32).
    const double base_d = c.rope_theta, orig = static_cast<double>(c.rope_original_max_position_embeddings);
    const auto correction_dim = [&](double rotations) {
      return static_cast<double>(dim) * std::log(orig / (rotations * 2.0 * M_PI)) / (2.0 * std::log(base_d));
    };
    double low = correction_dim(c.rope_beta_fast), high = correction_dim(c.rope_beta_slow);
    if (c.rope_truncate) {
      low = std::floor(low);
      high = std::ceil(high);
    }
    low = std::max(low, 0.0);
    high = std::min(high, static_cast<double>(dim - 1));
    if (low == high) high += 0.001;  // prevent singularity
    const float low_f = static_cast<float>(low), span = static_cast<float>(high - low);
    const float factor = static_cast<float>(c.rope_factor);
    for (int64_t i = 0; i < dim / 2; ++i) {
      const float pos_freq = std::pow(base, static_cast<float>(2 * i) / static_cast<float>(dim));
      const float extrapolation = 1.0f / pos_freq, interpolation = 1.0f / (factor * pos_freq);
      const float ramp = std::min(1.0f, std::max(0.0f, (static_cast<float>(i) - low_f) / span));
      const float extrapolation_factor = 1.0f - ramp;
      inv[i] = interpolation * (1.0f - extrapolation_factor) + extrapolation * extrapolation_factor;
    }
  }
  return inv;
}

std::vector<float> rope_dynamic_ntk_inv_freq(const ModelConfig& c, int64_t seq_len) {
  ModelConfig d = c;
  d.rope_type = RopeType::Default;
  if (seq_len <= c.max_position_embeddings) return rope_inv_freq(d);
  const float dim = static_cast<float>(c.rotary_ndims), factor = static_cast<float>(c.rope_factor);
  const float ratio = factor * static_cast<float>(seq_len) / static_cast<float>(c.max_position_embeddings) - (factor - 1.0f);
  d.rope_theta = static_cast<float>(c.rope_theta) * std::pow(ratio, dim / (dim - 2.0f));
  return rope_inv_freq(d);
}

void apply_rotary(float* x, int pos, const std::vector<float>& inv_freq, float attention_factor) {
  const size_t half = inv_freq.size();
  for (size_t i = 0; i < half; ++i) {
    const float angle = static_cast<float>(pos) * inv_freq[i];
    const float cs = std::cos(angle) * attention_factor, sn = std::sin(angle) * attention_factor;
    const float a = x[i], b = x[i + half];
    x[i] = a * cs - b * sn;
    x[i + half] = b * cs + a * sn;
  }
}

}  // namespace tpshard
