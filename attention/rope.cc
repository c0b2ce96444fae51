#include "attention/rope.h"

#include <algorithm>
#include <cmath>

#include "core/status.h"

namespace mtpspec {
namespace {

double YarnMscale(double factor, double mscale) {
  return factor <= 1.0 ? 1.0 : 0.1 * mscale * std::log(factor) + 1.0;
}

// Dimension index at which a wavelength completes `rotations` turns over the original context.
double CorrectionDim(double rotations, double dim, double base, double original_max_positions) {
  return dim * std::log(original_max_positions / (rotations * 2.0 * M_PI)) / (2.0 * std::log(base));
}

}  // namespace

RotaryEmbedding::RotaryEmbedding(const RopeConfig& config, int64_t rotary_dim) : rotary_dim_(rotary_dim) {
  MTPSPEC_CHECK(rotary_dim % 2 == 0 && rotary_dim > 0);
  const int64_t half = rotary_dim / 2;
  inv_freq_.resize(half);
  // Frequencies are rounded to fp32 like transformers computes them.
  std::vector<float> base_freq(half);
  for (int64_t i = 0; i < half; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(rotary_dim);
    base_freq[i] = 1.0f / std::pow(static_cast<float>(config.theta), exponent);
  }
  if (config.type != "yarn") {
    inv_freq_ = base_freq;
    attention_factor_ = 1.0f;
    return;
  }
  const double dim = static_cast<double>(rotary_dim);
  double low = CorrectionDim(config.beta_fast, dim, config.theta, config.original_max_position_embeddings);
  double high = CorrectionDim(config.beta_slow, dim, config.theta, config.original_max_position_embeddings);
  if (config.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, dim - 1);
  if (low == high) high += 0.001;  // avoid a zero-width ramp
  for (int64_t i = 0; i < half; ++i) {
    // ramp = 1 → fully interpolated (θ/s), ramp = 0 → original θ.
    const float ramp = std::clamp(static_cast<float>((static_cast<double>(i) - low) / (high - low)), 0.0f, 1.0f);
    const float interpolated = base_freq[i] / static_cast<float>(config.factor);
    inv_freq_[i] = interpolated * ramp + base_freq[i] * (1.0f - ramp);
  }
  if (config.attention_factor != 0.0) {
    attention_factor_ = static_cast<float>(config.attention_factor);
  } else if (config.mscale != 0.0 && config.mscale_all_dim != 0.0) {
    attention_factor_ =
        static_cast<float>(YarnMscale(config.factor, config.mscale) / YarnMscale(config.factor, config.mscale_all_dim));
  } else {
    attention_factor_ = static_cast<float>(YarnMscale(config.factor, 1.0));
  }
}

void RotaryEmbedding::Apply(float* x, int64_t position, RopeStyle style) const {
  const int64_t half = rotary_dim_ / 2;
  const float pos = static_cast<float>(position);
  for (int64_t i = 0; i < half; ++i) {
    const float angle = pos * inv_freq_[i];  // fp32 product, as transformers forms it
    const float c = static_cast<float>(std::cos(static_cast<double>(angle))) * attention_factor_;
    const float s = static_cast<float>(std::sin(static_cast<double>(angle))) * attention_factor_;
    float* u;
    float* w;
    if (style == RopeStyle::kInterleaved) {
      u = x + 2 * i;
      w = x + 2 * i + 1;
    } else {
      u = x + i;
      w = x + i + half;
    }
    const float a = *u, b = *w;
    *u = a * c - b * s;
    *w = b * c + a * s;
  }
}

}  // namespace mtpspec
