// One context length of the trade-off benchmark: fill the caches to N once, then measure the plain
// step T1(N), the verify cost Tv(L, N) per attention path with its component split and bytes-touched
// bound, the MTP draft step, the predicted speedup S(k, N) = E[L] / (r_k + k·c), and the measured
// end-to-end speedup of Generate (plain vs MTP k and adaptive k).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/model.h"
#include "nlohmann/json.hpp"
#include "verify/acceptance.h"

namespace mtpspec::bench {

// The end-to-end A/A control's label: plain decoding run a second time, interleaved with the rest.
inline constexpr char kPlainControlLabel[] = "plain (A/A)";
// Adaptive k with one controller carried across a context's runs (plain "auto" gets a fresh one).
inline constexpr char kAutoCarriedLabel[] = "auto (carried)";

struct PointSettings {
  int64_t max_rows = 8;        // L = 1 … max_rows
  int64_t reps = 5;            // timed repetitions per (path, L), interleaved
  int64_t fill_chunk = 512;    // prefill chunk rows
  int64_t new_tokens = 48;     // tokens generated per end-to-end run
  int64_t e2e_reps = 1;        // end-to-end runs per configuration (interleaved)
  // Further interleaved runs of plain, auto and the plain A/A control only, for the paired
  // auto-vs-plain comparison (their tokens/s join run_tokens_per_second, not the totals).
  int64_t g5_reps = 0;
  std::vector<int64_t> e2e_k;  // fixed k values to run (plus plain and adaptive)
  bool adaptive = true;
  double read_bandwidth = 0;   // bytes/s, measured in the same run
  double mac_rate = 0;         // multiply-adds/s of Linear when compute-bound, measured in the same run
  uint64_t seed = 7;
  // Acceptance used by the prediction and by the end-to-end runs.
  AcceptRule rule = AcceptRule::kSynthetic;  // kSynthetic (bench model) or kSamplerEquality (trained model)
  std::vector<double> rates;                 // conditional acceptance a_1 … (synthetic rates, predictions)
  // Sampling temperature of the end-to-end runs. With SYNTHETIC acceptance it only picks the tokens:
  // 1 gives the varied tokens (and MoE routing) of real text, where greedy decoding of the random
  // bench model repeats a few tokens whose experts then stay in the last-level cache.
  double e2e_temperature = 0.0;
  std::string rates_source;
};

struct PointState;  // caches, samples and the rest of one context's measurement

// One context N. Prepare fills the caches (prompt of N tokens) and warms every (path, L) up;
// MeasureRound adds one timed repetition of every (path, L) and of the MTP step, so the caller can
// interleave rounds over several contexts (cross-N ratios then see the same machine load); Finish
// adds the bytes-touched bounds, the prediction and the end-to-end runs, and returns the JSON.
class ContextPoint {
 public:
  static absl::StatusOr<std::unique_ptr<ContextPoint>> Prepare(const Model& model, const std::vector<int32_t>& prompt,
                                                               const PointSettings& settings);
  ~ContextPoint();
  absl::Status MeasureRound();
  absl::StatusOr<nlohmann::json> Finish();

 private:
  explicit ContextPoint(std::unique_ptr<PointState> state);
  std::unique_ptr<PointState> state_;
};

// Prepares each prompt, runs `settings.reps` rounds interleaved over them, then finishes each.
absl::StatusOr<std::vector<nlohmann::json>> MeasurePoints(const Model& model,
                                                          const std::vector<std::vector<int32_t>>& prompts,
                                                          const PointSettings& settings);

// Sums the e2e results of several MeasurePoint JSONs for one context (trained-model windows).
nlohmann::json MergeEndToEnd(const std::vector<nlohmann::json>& points);

}  // namespace mtpspec::bench
