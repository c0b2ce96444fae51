#include "bench/acceptance_stats.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

namespace mtpspec::bench {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Pooled statistics of one (re)sample: [unconditional k | conditional k | mean length].
std::vector<double> Pooled(const std::vector<WindowCounts>& windows, const std::vector<int64_t>& pick, int64_t k) {
  int64_t drafts = 0, accepted_total = 0;
  std::vector<int64_t> reached(k, 0), accepted(k, 0);
  for (int64_t w : pick) {
    const WindowCounts& c = windows[w];
    drafts += c.drafts;
    accepted_total += c.accepted_total;
    for (int64_t i = 0; i < k; ++i) {
      reached[i] += c.reached[i];
      accepted[i] += c.accepted[i];
    }
  }
  std::vector<double> out(2 * k + 1, kNaN);
  for (int64_t i = 0; i < k; ++i) {
    if (drafts > 0) out[i] = static_cast<double>(accepted[i]) / drafts;
    if (reached[i] > 0) out[k + i] = static_cast<double>(accepted[i]) / reached[i];
  }
  if (drafts > 0) out[2 * k] = 1.0 + static_cast<double>(accepted_total) / drafts;
  return out;
}

// The q-quantile of the finite values (NaN when none).
double Quantile(std::vector<double> values, double q) {
  values.erase(std::remove_if(values.begin(), values.end(), [](double v) { return std::isnan(v); }), values.end());
  if (values.empty()) return kNaN;
  std::sort(values.begin(), values.end());
  const double at = q * static_cast<double>(values.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(at));
  const size_t hi = std::min(values.size() - 1, lo + 1);
  return values[lo] + (values[hi] - values[lo]) * (at - static_cast<double>(lo));
}

}  // namespace

WindowCounts CountsFromStats(const SpecStats& stats, int64_t k) {
  WindowCounts c;
  c.drafts = stats.num_drafts;
  c.accepted_total = stats.num_accepted_tokens;
  c.generated = stats.generated_tokens;
  auto take = [k](const std::vector<int64_t>& v) {
    std::vector<int64_t> out(k, 0);
    for (int64_t i = 0; i < k && i < static_cast<int64_t>(v.size()); ++i) out[i] = v[i];
    return out;
  };
  c.drafted = take(stats.drafted_per_pos);
  c.reached = take(stats.reached_per_pos);
  c.accepted = take(stats.accepted_per_pos);
  return c;
}

AcceptanceSummary Summarize(const std::vector<WindowCounts>& windows, int64_t k, int64_t resamples, uint64_t seed) {
  AcceptanceSummary s;
  const int64_t n = static_cast<int64_t>(windows.size());
  s.windows = n;
  s.drafted.assign(k, 0);
  s.reached.assign(k, 0);
  s.accepted.assign(k, 0);
  for (const WindowCounts& c : windows) {
    s.cycles += c.drafts;
    s.generated += c.generated;
    for (int64_t i = 0; i < k; ++i) {
      s.drafted[i] += c.drafted[i];
      s.reached[i] += c.reached[i];
      s.accepted[i] += c.accepted[i];
    }
  }
  std::vector<int64_t> all(n);
  for (int64_t i = 0; i < n; ++i) all[i] = i;
  const std::vector<double> point = Pooled(windows, all, k);

  // replicate[b] = the pooled statistics of bootstrap resample b.
  std::vector<std::vector<double>> replicate;
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> pick_window(0, std::max<int64_t>(n - 1, 0));
  std::vector<int64_t> pick(n);
  for (int64_t b = 0; n > 0 && b < resamples; ++b) {
    for (int64_t& p : pick) p = pick_window(rng);
    replicate.push_back(Pooled(windows, pick, k));
  }
  auto interval = [&](int64_t index) {
    Interval iv;
    iv.mean = point[index];
    std::vector<double> values;
    for (const auto& r : replicate) values.push_back(r[index]);
    iv.lo = Quantile(values, 0.025);
    iv.hi = Quantile(values, 0.975);
    return iv;
  };
  for (int64_t i = 0; i < k; ++i) {
    s.unconditional.push_back(interval(i));
    s.conditional.push_back(interval(k + i));
  }
  s.mean_length = interval(2 * k);
  return s;
}

nlohmann::json ToJson(const Interval& iv) {
  auto num = [](double v) { return std::isnan(v) ? nlohmann::json(nullptr) : nlohmann::json(v); };
  return {{"mean", num(iv.mean)}, {"lo", num(iv.lo)}, {"hi", num(iv.hi)}};
}

nlohmann::json ToJson(const AcceptanceSummary& s) {
  nlohmann::json unconditional = nlohmann::json::array(), conditional = nlohmann::json::array();
  for (const Interval& iv : s.unconditional) unconditional.push_back(ToJson(iv));
  for (const Interval& iv : s.conditional) conditional.push_back(ToJson(iv));
  return {{"windows", s.windows},
          {"cycles", s.cycles},
          {"generated_tokens", s.generated},
          {"drafted_per_pos", s.drafted},
          {"reached_per_pos", s.reached},
          {"accepted_per_pos", s.accepted},
          {"unconditional", unconditional},
          {"conditional", conditional},
          {"mean_acceptance_length", ToJson(s.mean_length)}};
}

double ExpectedLength(const std::vector<double>& conditional, int64_t k) {
  double total = 1.0, reach = 1.0;
  for (int64_t i = 0; i < k && i < static_cast<int64_t>(conditional.size()); ++i) {
    reach *= conditional[i];
    total += reach;
  }
  return total;
}

}  // namespace mtpspec::bench
