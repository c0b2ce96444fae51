// Adaptive k: each cycle, pick the draft length (0 = plain decoding) that maximises the expected
// tokens per second, from online estimates of per-position acceptance and of the measured costs of
// a draft step and of a verify of each length (model-spec / anchors §5):
//   E[tokens](k) = 1 + Σ_{i ≤ k} Π_{j ≤ i} a_j,   cost(k) = Tv(k + 1) + k · c,   pick argmax ratio.
// Costs never measured are extrapolated linearly from those that were; k = 0 is always a
// candidate, so the controller falls back to plain decoding when drafting cannot pay, and probes
// k = 1 now and then to keep its acceptance estimate fresh.
#pragma once

#include <cstdint>
#include <vector>

namespace mtpspec {

class AdaptiveK {
 public:
  explicit AdaptiveK(int64_t k_max, int64_t probe_interval = 16);

  int64_t Choose();
  // A verify of `drafted` tokens that accepted `accepted`, taking the given seconds.
  void RecordVerify(int64_t drafted, int64_t accepted, double verify_seconds);
  void RecordDraftStep(double seconds_per_step);

  double ExpectedTokens(int64_t k) const;
  double ExpectedCost(int64_t k) const;
  double conditional_acceptance(int64_t position) const;

 private:
  double VerifyCost(int64_t rows) const;
  int64_t k_max_;
  int64_t probe_interval_;
  int64_t plain_streak_ = 0;
  std::vector<double> accept_hits_, accept_trials_;  // [k_max] conditional, with a Beta(1,1) prior
  std::vector<double> verify_cost_;                  // [k_max + 2] EMA seconds by rows; 0 = unmeasured
  double draft_cost_ = 0;                            // EMA seconds per draft step; 0 = unmeasured
};

}  // namespace mtpspec
