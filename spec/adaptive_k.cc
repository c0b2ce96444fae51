#include "spec/adaptive_k.h"

#include <algorithm>

namespace mtpspec {

constexpr double kEmaWeight = 0.2;

AdaptiveK::AdaptiveK(int64_t k_max, int64_t probe_interval)
    : k_max_(k_max),
      probe_interval_(probe_interval),
      accept_hits_(k_max, 0.0),
      accept_trials_(k_max, 0.0),
      verify_cost_(k_max + 2, 0.0) {}

double AdaptiveK::conditional_acceptance(int64_t i) const {
  return (accept_hits_[i] + 1.0) / (accept_trials_[i] + 2.0);  // posterior mean under Beta(1, 1)
}

double AdaptiveK::ExpectedTokens(int64_t k) const {
  double total = 1.0, reach = 1.0;
  for (int64_t i = 0; i < k; ++i) {
    reach *= conditional_acceptance(i);
    total += reach;
  }
  return total;
}

double AdaptiveK::VerifyCost(int64_t rows) const {
  if (verify_cost_[rows] > 0) return verify_cost_[rows];
  // Linear fit through the two nearest measured lengths, or a flat guess from one.
  int64_t below = -1, above = -1;
  for (int64_t r = rows - 1; r >= 1; --r) {
    if (verify_cost_[r] > 0) {
      below = r;
      break;
    }
  }
  for (int64_t r = rows + 1; r < static_cast<int64_t>(verify_cost_.size()); ++r) {
    if (verify_cost_[r] > 0) {
      above = r;
      break;
    }
  }
  if (below > 0 && above > 0) {
    const double t = static_cast<double>(rows - below) / (above - below);
    return verify_cost_[below] * (1 - t) + verify_cost_[above] * t;
  }
  if (below > 0) {
    int64_t lower = -1;
    for (int64_t r = below - 1; r >= 1; --r) {
      if (verify_cost_[r] > 0) {
        lower = r;
        break;
      }
    }
    const double slope = lower > 0 ? (verify_cost_[below] - verify_cost_[lower]) / (below - lower)
                                   : 0.1 * verify_cost_[below];
    return verify_cost_[below] + slope * (rows - below);
  }
  if (above > 0) return verify_cost_[above];
  return 1.0;  // nothing measured yet: every k costs the same, acceptance priors decide
}

double AdaptiveK::ExpectedCost(int64_t k) const { return VerifyCost(k + 1) + k * draft_cost_; }

int64_t AdaptiveK::Choose() {
  if (verify_cost_[1] == 0) return 0;  // measure a plain step first
  int64_t best = 0;
  double best_rate = ExpectedTokens(0) / ExpectedCost(0);
  for (int64_t k = 1; k <= k_max_; ++k) {
    const double rate = ExpectedTokens(k) / ExpectedCost(k);
    if (rate > best_rate) {
      best_rate = rate;
      best = k;
    }
  }
  if (best == 0 && ++plain_streak_ >= probe_interval_) {
    plain_streak_ = 0;
    return std::min<int64_t>(1, k_max_);  // probe: keep the acceptance estimate of position 1 alive
  }
  if (best > 0) plain_streak_ = 0;
  return best;
}

void AdaptiveK::RecordVerify(int64_t drafted, int64_t accepted, double seconds) {
  for (int64_t i = 0; i < drafted && i <= accepted; ++i) {
    accept_trials_[i] += 1.0;
    if (i < accepted) accept_hits_[i] += 1.0;
  }
  double& cost = verify_cost_[drafted + 1];
  cost = cost > 0 ? (1 - kEmaWeight) * cost + kEmaWeight * seconds : seconds;
}

void AdaptiveK::RecordDraftStep(double seconds) {
  draft_cost_ = draft_cost_ > 0 ? (1 - kEmaWeight) * draft_cost_ + kEmaWeight * seconds : seconds;
}

}  // namespace mtpspec
