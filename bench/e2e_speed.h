// End-to-end decode speed: Generate with a timestamp on every committed batch, so the steady-state
// rate can exclude the prefill (with the drafter's prompt extend) and the first cycle.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

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
  // Steady-state tokens/s of each run that went into a total, in repetition order (paired with
  // the other configurations' runs of the same repetitions).
  std::vector<double> run_tokens_per_second;
};

// Runs Generate and measures the steady-state rate: tokens committed after the second on_tokens
// call divided by the time from that call to the last one.
absl::StatusOr<SpeedResult> TimedGenerate(Target& target, Drafter* drafter, std::span<const int32_t> prompt,
                                          GenerateOptions options, const std::string& label);

// Sums several runs of one configuration.
void Accumulate(const SpeedResult& run, SpeedResult* total);

nlohmann::json ToJson(const SpeedResult& r);

}  // namespace mtpspec::bench
