// End-to-end decode speed: Generate with a timestamp on every committed batch, so the steady-state
// rate can exclude the prefill and the first cycle (whose draft includes the MTP layer's extend
// over the whole prompt, a one-off cost per request that does not belong to the per-step rate).
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "nlohmann/json.hpp"
#include "spec/generator.h"

namespace mtpspec::bench {

struct SpeedResult {
  std::string label;         // "plain", "k=2", "auto"
  int64_t tokens = 0;        // tokens committed after the first cycle (steady state)
  double seconds = 0;        // wall time over which they were committed
  double tokens_per_second = 0;
  double total_seconds = 0;  // the whole Generate call
  SpecStats stats;
};

// Runs Generate and measures the steady-state rate: tokens committed after the second on_tokens
// call divided by the time from that call to the last one.
absl::StatusOr<SpeedResult> TimedGenerate(Target& target, Drafter* drafter, std::span<const int32_t> prompt,
                                          GenerateOptions options, const std::string& label);

// Wraps a drafter so that its work on the prompt happens at prompt time, as a serving engine runs
// the MTP layer's prefill together with the target's: on the first Observe after Reset it proposes
// `k_max` drafts at once (the MTP drafter extends its cache over the whole prompt there) and hands
// the first k of them to the first Propose (a chain's first k drafts do not depend on k). Without
// this, the drafter defers the prompt extend to its first Propose, and Generate's adaptive-k
// controller books that one-off cost as the per-step draft cost.
class PromptPrefillDrafter : public Drafter {
 public:
  PromptPrefillDrafter(Drafter* inner, int64_t k_max, DraftSampling sampling)
      : inner_(inner), k_max_(k_max), sampling_(sampling) {}
  std::string name() const override { return inner_->name(); }
  absl::Status Observe(std::span<const int32_t> sequence, int64_t first_position, int64_t rows,
                       const TargetStep& step) override;
  absl::StatusOr<Draft> Propose(std::span<const int32_t> sequence, int64_t k, const DraftSampling& sampling) override;
  void Reset() override;
  double prompt_seconds() const { return prompt_seconds_; }

 private:
  Drafter* inner_;
  int64_t k_max_;
  DraftSampling sampling_;
  bool primed_ = false;
  bool has_stored_ = false;
  Draft stored_;
  double prompt_seconds_ = 0;
};

// Sums several runs of one configuration.
void Accumulate(const SpeedResult& run, SpeedResult* total);

nlohmann::json ToJson(const SpeedResult& r);

}  // namespace mtpspec::bench
