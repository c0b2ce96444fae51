// Rotary position embedding: plain RoPE and YaRN, in the interleaved (GPT-J) and half-split
// (NeoX) pairings (docs/models.md, "RoPE").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace mtpspec {

// RoPE parameters as read from config.json (`rope_parameters` or legacy `rope_scaling`).
struct RopeConfig {
  double theta = 10000.0;
  std::string type = "default";  // "default" or "yarn"
  double factor = 1.0;
  int64_t original_max_position_embeddings = 0;
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  double mscale = 0.0;            // 0 = absent
  double mscale_all_dim = 0.0;    // 0 = absent
  double attention_factor = 0.0;  // 0 = absent (derived from factor and mscales)
  bool truncate = true;
};

enum class RopeStyle {
  kInterleaved,  // pairs (x[2i], x[2i+1]) rotate by angle p·θ_i
  kHalfSplit,    // pairs (x[i], x[i + d/2]) rotate by angle p·θ_i
};

class RotaryEmbedding {
 public:
  RotaryEmbedding() = default;
  RotaryEmbedding(const RopeConfig& config, int64_t rotary_dim);

  int64_t rotary_dim() const { return rotary_dim_; }
  // θ_i for i < rotary_dim/2, after YaRN interpolation. [rotary_dim / 2]
  const std::vector<float>& inv_freq() const { return inv_freq_; }
  // Multiplier on cos and sin (YaRN "attention_factor"; 1 for plain RoPE).
  float attention_factor() const { return attention_factor_; }

  // Rotates x[0 .. rotary_dim) in place for absolute position `position`.
  void Apply(float* x, int64_t position, RopeStyle style) const;

 private:
  int64_t rotary_dim_ = 0;
  std::vector<float> inv_freq_;  // [rotary_dim / 2]
  float attention_factor_ = 1.0f;
};

}  // namespace mtpspec
