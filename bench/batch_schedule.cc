#include "bench/batch_schedule.h"

#include <algorithm>
#include <cmath>

namespace mtpspec::bench {
namespace {

// The table index below x and the weight of the one above: x = (1 − w) · at[i] + w · at[i + 1],
// clamped to the ends.
struct Bracket {
  size_t i = 0;
  double w = 0;
};
Bracket Locate(const std::vector<int64_t>& at, double x) {
  if (at.size() < 2 || x <= static_cast<double>(at.front())) return {0, 0.0};
  if (x >= static_cast<double>(at.back())) return {at.size() - 2, 1.0};
  size_t i = 0;
  while (static_cast<double>(at[i + 1]) < x) ++i;
  const double lo = static_cast<double>(at[i]), hi = static_cast<double>(at[i + 1]);
  return {i, (x - lo) / (hi - lo)};
}

double Lerp(const std::vector<double>& values, Bracket b) {
  if (values.size() < 2) return values.empty() ? 0.0 : values.front();
  return (1.0 - b.w) * values[b.i] + b.w * values[b.i + 1];
}

}  // namespace

double BatchCostTable::Verify(double requests, double rows_per_request) const {
  if (verify.empty()) return 0.0;
  const Bracket b = Locate(batches, requests);
  // Rows: L = 1 … max_rows at indices 0 … max_rows − 1.
  const double l = std::clamp(rows_per_request - 1.0, 0.0, static_cast<double>(max_rows() - 1));
  const size_t l0 = static_cast<size_t>(std::floor(l));
  const size_t l1 = std::min(l0 + 1, static_cast<size_t>(max_rows() - 1));
  const double lw = l - static_cast<double>(l0);
  auto at_rows = [&](size_t bi) { return (1.0 - lw) * verify[bi][l0] + lw * verify[bi][l1]; };
  if (verify.size() < 2) return at_rows(0);
  return (1.0 - b.w) * at_rows(b.i) + b.w * at_rows(b.i + 1);
}

double BatchCostTable::DraftStep(double chains) const { return Lerp(draft_step, Locate(batches, chains)); }
double BatchCostTable::Extend(double chains) const { return Lerp(extend, Locate(batches, chains)); }

double PriceCycle(const BatchCostTable& costs, const BatchCycle& cycle) {
  if (cycle.requests <= 0) return 0.0;
  const double requests = static_cast<double>(cycle.requests);
  double seconds = costs.Verify(requests, static_cast<double>(cycle.verify_rows) / requests);
  int64_t depth = 0, drafting = 0;
  for (int64_t k : cycle.draft_lengths) {
    depth = std::max(depth, k);
    drafting += k > 0 ? 1 : 0;
  }
  for (int64_t j = 1; j <= depth; ++j) {  // one batched step per depth, for the chains that reach it
    int64_t chains = 0;
    for (int64_t k : cycle.draft_lengths) chains += k >= j ? 1 : 0;
    seconds += costs.DraftStep(static_cast<double>(chains));
  }
  if (drafting > 0) seconds += costs.Extend(static_cast<double>(drafting));
  return seconds;
}

BatchCycle SteadyCycle(int64_t requests, int64_t k) {
  BatchCycle cycle;
  cycle.requests = requests;
  cycle.draft_lengths.assign(requests, k);
  cycle.verify_rows = requests * (k + 1);
  return cycle;
}

double PriceCycles(const BatchCostTable& costs, const std::vector<BatchCycle>& cycles) {
  double seconds = 0;
  for (const BatchCycle& c : cycles) seconds += PriceCycle(costs, c);
  return seconds;
}

std::vector<BatchCycle> SimulateBatchRun(const std::vector<int64_t>& budgets, int64_t k,
                                         const std::vector<double>& rates, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  std::vector<int64_t> generated(budgets.size(), 1);  // the prefill draws each request's first token
  std::vector<BatchCycle> cycles;
  while (true) {
    BatchCycle cycle;
    std::vector<size_t> active;
    for (size_t r = 0; r < budgets.size(); ++r) {
      if (generated[r] < budgets[r]) active.push_back(r);
    }
    if (active.empty()) break;
    cycle.requests = static_cast<int64_t>(active.size());
    for (size_t r : active) {
      const int64_t drafted = std::max<int64_t>(0, std::min(k, budgets[r] - generated[r] - 1));
      int64_t accepted = 0;
      while (accepted < drafted) {
        const double rate = rates.empty() ? 0.0 : rates[std::min<size_t>(accepted, rates.size() - 1)];
        if (!(uniform(rng) < rate)) break;
        ++accepted;
      }
      cycle.draft_lengths.push_back(drafted);
      cycle.verify_rows += drafted + 1;
      generated[r] += accepted + 1;  // the accepted drafts and the target's own next token
    }
    cycles.push_back(std::move(cycle));
  }
  return cycles;
}

SimulatedRuns ExpectedBatchRun(const BatchCostTable& costs, int64_t batch, int64_t budget, int64_t k,
                               const std::vector<double>& rates, int64_t runs, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const std::vector<int64_t> budgets(batch, budget);
  SimulatedRuns mean;
  for (int64_t run = 0; run < runs; ++run) {
    const std::vector<BatchCycle> cycles = SimulateBatchRun(budgets, k, rates, rng);
    mean.seconds += PriceCycles(costs, cycles);
    mean.cycles += static_cast<double>(cycles.size());
  }
  if (runs > 0) {
    mean.seconds /= static_cast<double>(runs);
    mean.cycles /= static_cast<double>(runs);
  }
  return mean;
}

}  // namespace mtpspec::bench
