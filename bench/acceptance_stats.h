// Per-position acceptance over held-out windows, with 95% confidence intervals from a percentile
// bootstrap over windows (a window — one prompt and its generated continuation — is the unit of
// sampling: the cycles inside one window are correlated, windows are independent draws).
#pragma once

#include <cstdint>
#include <vector>

#include "nlohmann/json.hpp"
#include "spec/stats.h"

namespace mtpspec::bench {

// The counts one Generate call produced (SpecStats' per-position counters, k entries each).
struct WindowCounts {
  int64_t drafts = 0;          // verify steps that carried drafts
  int64_t accepted_total = 0;  // Σ accepted drafts
  int64_t generated = 0;
  std::vector<int64_t> drafted;   // [k] steps whose draft had position i
  std::vector<int64_t> reached;   // [k] … and every earlier position was accepted
  std::vector<int64_t> accepted;  // [k] … and position i was accepted
};

WindowCounts CountsFromStats(const SpecStats& stats, int64_t k);

struct Interval {
  double mean = 0, lo = 0, hi = 0;  // point estimate (pooled over windows) and 95% bootstrap bounds
};

struct AcceptanceSummary {
  int64_t windows = 0;
  int64_t cycles = 0;  // verify steps with drafts, all windows
  int64_t generated = 0;
  std::vector<int64_t> drafted, reached, accepted;  // [k] pooled counts
  std::vector<Interval> unconditional;  // [k] accepted_i / drafts: P(positions 1..i all accepted)
  std::vector<Interval> conditional;    // [k] accepted_i / reached_i: P(i accepted | 1..i−1 accepted)
  Interval mean_length;                 // 1 + Σ accepted / drafts (bonus token included)
};

// Pools `windows` (each with k positions) and bootstraps `resamples` times with `seed`.
AcceptanceSummary Summarize(const std::vector<WindowCounts>& windows, int64_t k, int64_t resamples, uint64_t seed);

nlohmann::json ToJson(const Interval& interval);
nlohmann::json ToJson(const AcceptanceSummary& summary);

// E[L] = 1 + Σ_{i ≤ k} Π_{j ≤ i} a_j for conditional rates a (anchors §5).
double ExpectedLength(const std::vector<double>& conditional, int64_t k);

}  // namespace mtpspec::bench
