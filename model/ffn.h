// Feed-forward blocks: the dense SwiGLU MLP and the sigmoid-routed MoE with shared experts
// (docs/models.md, "MoE").
#pragma once

#include <cstdint>
#include <vector>

#include "model/config.h"
#include "model/routing_rule.h"
#include "model/weights.h"

namespace mtpspec {

// out[rows, H] = W_down (SiLU(W_gate x) ⊙ W_up x). x: [rows, H].
void MlpForward(const MlpWeights& w, const float* x, int64_t rows, int64_t hidden, float* out);

// The router's decision for each row: k_e experts and their combination weights.
struct Routing {
  int64_t per_row = 0;          // k_e
  std::vector<int32_t> expert;  // [rows, k_e]
  std::vector<float> weight;    // [rows, k_e], Σ = routed_scaling_factor when norm_topk_prob
};

// fp32 router: σ = sigmoid(W_g x); selection by σ + e_score_correction_bias (group-limited when
// n_group > 1, excluded groups filled with −∞); weights from the unbiased σ.
// The routing rule of a config (model/routing_rule.h).
RoutingRule RoutingRuleOf(const ModelConfig& config);

Routing RouteTokens(const MoeWeights& w, const ModelConfig& config, const float* x, int64_t rows);

// out[rows, H] = Σ_e g_e Expert_e(x) + Shared(x). Each selected expert runs once over the rows
// that chose it: its weights are read once for all of them. `experts_used`, when given, receives
// the number of routed experts the rows chose between them (the expert union).
void MoeForward(const MoeWeights& w, const ModelConfig& config, const float* x, int64_t rows, float* out,
                int64_t* experts_used = nullptr);

}  // namespace mtpspec
