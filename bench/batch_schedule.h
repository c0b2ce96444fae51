// The batch cost model over a run's cycles, not only its steady state.
//
// batch_bench's steady-state prediction prices every cycle as B requests verifying k + 1 rows each:
// tokens/s = B · AL(k) / (T(B, k + 1) + k · D(B) + X(B)). A run of G tokens per request does not stay
// there. Each request stops at its own G-th token, so the last cycles run fewer requests (one
// straggler may run several cycles alone), and a request near its budget drafts fewer than k tokens
// (k' = min(k, tokens left − 1)). Both lower the tokens each cycle commits, while the costs of the
// cycle do not fall in proportion.
//
// PriceCycle prices one cycle as it ran (a BatchCycle of the run's log, or one SimulateBatchRun
// made) from the measured cost table: the verify at the cycle's requests and rows, one batched draft
// step per draft depth for the chains that reach it, and the extend of the chains that drafted.
// SimulateBatchRun plays a run's cycles with synthetic acceptance at the given conditional rates,
// under the rules GenerateBatch follows; the expected seconds over many simulated runs give the
// prediction for a run of that length.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "spec/batch.h"

namespace mtpspec::bench {

// Measured costs by batch size: the cost table of batch_bench and its draft costs.
struct BatchCostTable {
  std::vector<int64_t> batches;             // [nb] B, ascending, distinct
  std::vector<std::vector<double>> verify;  // [nb][L] T(B, l + 1): one forward of B sequences, l + 1 rows each
  std::vector<double> draft_step;           // [nb] D(B): one batched draft step of B chains
  std::vector<double> extend;               // [nb] X(B): the batched extend of B chains' committed rows

  // T at `requests` sequences of `rows_per_request` rows each (both may be fractional: a cycle of
  // mixed draft lengths), bilinear between the table's points; clamped to the table's ends.
  double Verify(double requests, double rows_per_request) const;
  double DraftStep(double chains) const;  // D, linear in the chains between the table's B
  double Extend(double chains) const;     // X, likewise
  int64_t max_rows() const { return verify.empty() ? 0 : static_cast<int64_t>(verify.front().size()); }
};

// Seconds of one cycle: T(A, rows / A) + Σ_j D(chains drafting at depth j) + X(chains that drafted),
// A the cycle's requests. With every chain at k this is the steady state's T(A, k + 1) + k · D(A) + X(A).
double PriceCycle(const BatchCostTable& costs, const BatchCycle& cycle);
// A cycle of the steady state: `requests` chains, each drafting k.
BatchCycle SteadyCycle(int64_t requests, int64_t k);
double PriceCycles(const BatchCostTable& costs, const std::vector<BatchCycle>& cycles);

// The cycles of one run of requests with these token budgets (max_new_tokens each, the first drawn by
// the prefill), all starting together and each drafting min(k, budget − generated − 1) per cycle, a
// draft position accepted with its conditional rate (rates past the list: the last). `rng` draws the
// acceptance. Requests leave when they reach their budget.
std::vector<BatchCycle> SimulateBatchRun(const std::vector<int64_t>& budgets, int64_t k,
                                         const std::vector<double>& rates, std::mt19937_64& rng);

// The mean over `runs` simulated runs of B requests of `budget` tokens each: seconds priced by
// `costs`, and cycles. Decoded tokens are B · (budget − 1) in every run.
struct SimulatedRuns {
  double seconds = 0;
  double cycles = 0;
};
SimulatedRuns ExpectedBatchRun(const BatchCostTable& costs, int64_t batch, int64_t budget, int64_t k,
                               const std::vector<double>& rates, int64_t runs, uint64_t seed);

}  // namespace mtpspec::bench
