// The MoE routing rule (docs/models.md, "MoE"), written once for the host and the device.
//
// From one row's sigmoid scores σ [E] and its selection scores s = σ + e_score_correction_bias
// [E]: when n_group > 1, each group of E / n_group experts scores the sum of its two largest s,
// and the topk_group best groups (ties to the lower group) stay eligible, the other groups' experts
// set to −∞; then the k_e experts with the largest s (ties to the lower index) are chosen, in rank
// order, with weights σ_e · norm · routed_scaling_factor, norm = 1 / (Σ σ + 1e-20) over the chosen
// experts when norm_topk_prob, else 1. RouteTokens (model/ffn.cc) and the device's routing kernel
// (model/ffn_cuda.cu) both call SelectExperts, so they choose the same experts with the same
// weights, bit for bit.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/host_device.h"

namespace mtpspec {

struct RoutingRule {
  int64_t experts = 0;      // E
  int64_t top_k = 0;        // k_e
  int64_t n_group = 1;
  int64_t topk_group = 1;
  bool norm_topk_prob = true;
  float scaling = 1.0f;     // routed_scaling_factor
};

// One row. sigma, choice: [E] (choice is overwritten: excluded groups become −∞); scratch
// group_score [G] and keep_group [G], taken [E]; out expert, weight: [k_e] in rank order.
MTPSPEC_HOST_DEVICE inline void SelectExperts(const RoutingRule& rule, const float* sigma, float* choice,
                                              float* group_score, int* keep_group, int* taken, int32_t* expert,
                                              float* weight) {
  const int64_t experts = rule.experts, groups = rule.n_group;
  const float neg_inf = -INFINITY;
  for (int64_t e = 0; e < experts; ++e) taken[e] = 0;
  if (groups > 1) {
    const int64_t group_size = experts / groups;
    for (int64_t g = 0; g < groups; ++g) {
      const float* s = choice + g * group_size;
      float first = neg_inf, second = neg_inf;
      for (int64_t i = 0; i < group_size; ++i) {
        if (s[i] > first) {
          second = first;
          first = s[i];
        } else if (s[i] > second) {
          second = s[i];
        }
      }
      group_score[g] = first + second;
      keep_group[g] = 0;
    }
    for (int64_t i = 0; i < rule.topk_group; ++i) {
      int64_t best = -1;
      for (int64_t g = 0; g < groups; ++g) {
        if (!keep_group[g] && (best < 0 || group_score[g] > group_score[best])) best = g;
      }
      keep_group[best] = 1;
    }
    for (int64_t e = 0; e < experts; ++e) {
      if (!keep_group[e / group_size]) choice[e] = neg_inf;
    }
  }
  float sum = 0.0f;
  for (int64_t i = 0; i < rule.top_k; ++i) {
    int64_t best = -1;
    for (int64_t e = 0; e < experts; ++e) {
      if (!taken[e] && (best < 0 || choice[e] > choice[best])) best = e;
    }
    taken[best] = 1;
    expert[i] = static_cast<int32_t>(best);
    sum += sigma[best];
  }
  const float norm = rule.norm_topk_prob ? 1.0f / (sum + 1e-20f) : 1.0f;
  for (int64_t i = 0; i < rule.top_k; ++i) weight[i] = sigma[expert[i]] * norm * rule.scaling;
}

}  // namespace mtpspec
