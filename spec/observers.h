// The loop's two built-in observers (spec/loop.h): the statistics every request reports, and the
// adaptive-k controller as the draft-length policy of a `k = auto` request.
#pragma once

#include <memory>
#include <optional>

#include "spec/adaptive_k.h"
#include "spec/loop.h"
#include "spec/stats.h"

namespace mtpspec {

// Books the records into SpecStats (see spec/stats.h for what each field holds).
class StatsRecorder : public LoopObserver {
 public:
  explicit StatsRecorder(SpecStats& stats) : stats_(stats) {}
  void OnPrefill(const PrefillRecord& record) override;
  void OnCycle(const CycleRecord& record) override;

 private:
  SpecStats& stats_;
};

// Adaptive k (spec/adaptive_k.h) as the loop's policy: a fresh controller for this request, or a
// carried one that has served earlier requests (then BeginRequest starts this one).
class AdaptivePolicy : public DraftLengthPolicy {
 public:
  AdaptivePolicy(int64_t k_max, std::shared_ptr<AdaptiveK> carried);
  bool DeferPrompt(int64_t prompt_rows, int64_t tokens_left) override;
  int64_t Choose(int64_t tokens_left, bool* probe) override;
  void OnCycle(const CycleRecord& record) override;

 private:
  std::optional<AdaptiveK> own_;
  std::shared_ptr<AdaptiveK> carried_;
  AdaptiveK* controller_;
};

}  // namespace mtpspec
