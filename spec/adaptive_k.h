// Adaptive k: each cycle, pick the draft length (0 = plain decoding) that maximises the expected
// tokens per second, from online estimates of per-position acceptance and of the measured costs:
//   E[tokens](k) = 1 + Σ_{i ≤ k} Π_{j ≤ i} a_j
//   cost(0) = Tv(1),   cost(k ≥ 1) = Tv(k + 1) + k · c + x
// where Tv(L) is a verify of L rows, c one draft step and x the drafter's per-cycle extend of the
// committed rows. Pick argmax E / cost. ARCHITECTURE.md, "Adaptive k", gives the policy in prose.
//
// - Warm-up: the first kWarmUpPlainSteps cycles decode plainly (the first steps after a prefill run
//   cold), and a plain step's cost is the minimum of its samples until there are that many.
// - Ramp: k is considered only once a verify of k rows was measured; unmeasured lengths are
//   interpolated, extrapolated along the two longest measured ones, or priced at Tv(L) = L · Tv(1).
// - Exploration: every `gap` cycles the controller probes an alternative (a burst of k = 1 cycles
//   while plain; k = 0 and k + 1 in turn while drafting); an unchanged choice doubles the gap (up to
//   max_probe_interval), a change resets it.
// - Budget: a probe is made only while the estimated loss of all probes stays within
//   kExplorationBudget of the request's decode time (decoded so far plus, after SetTokensLeft, the
//   tokens it may still produce at the best rate); unmeasured parts are priced from priors
//   (kPriorDraftStep plain steps, a = 1/2), so a fresh controller probes only in requests of about
//   200 tokens or more.
// - Stopping: plain decoding is probed again only while some k could still beat it by kSwitchMargin
//   with every acceptance one posterior standard deviation high (ExpectedTokensHigh).
// - Across requests: one controller may serve a series (BeginRequest); costs, acceptance and the
//   probe schedule carry over, the budget and the warm-up start afresh (with last request's unspent
//   budget added).
// - Prompt deferral: a controller that expects plain decoding throughout lets the drafter skip the
//   prompt's extend (DeferPrompt), which would evict the trunk's weights from the cache.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace mtpspec {

inline constexpr double kExplorationBudget = 0.01;
// Cycles between probes at first, and at most (a stable regime doubles the gap up to it).
inline constexpr int64_t kProbeInterval = 8;
inline constexpr int64_t kMaxProbeInterval = 512;
// Plain decoding is left for drafting only when drafting's expected rate beats it by this fraction:
// near a tie, switching costs more (the drafter's catch-up over the rows it deferred, and cycles
// spent on whichever side the noise favours) than the estimates can tell apart.
inline constexpr double kSwitchMargin = 0.05;
// Leaving plain decoding is judged with acceptance one posterior standard deviation low
// (ExpectedTokensLow). It also costs the drafter's catch-up over the rows it deferred: the
// expected saving over this many drafting cycles must cover it (else, after a long plain stretch,
// one lucky estimate buys a catch-up worth tens of plain steps).
inline constexpr int64_t kSwitchHorizon = 64;
inline constexpr int64_t kWarmUpPlainSteps = 3;
// A k = 1 probe from plain decoding is a burst of up to this many consecutive drafting cycles.
inline constexpr int64_t kProbeBurst = 4;
// A draft step's cost, in plain steps, until one has been measured.
inline constexpr double kPriorDraftStep = 0.5;

class AdaptiveK {
 public:
  explicit AdaptiveK(int64_t k_max, int64_t probe_interval = kProbeInterval,
                     int64_t max_probe_interval = kMaxProbeInterval,
                     double exploration_budget = kExplorationBudget);

  // A new request on a carried controller (see the header); nothing on one that has seen no cycle.
  void BeginRequest();
  // After BeginRequest, for a request whose prompt has `prompt_rows` rows and that may produce
  // `tokens_left` more tokens (negative: unknown): whether the drafter may leave the prompt for its
  // next Propose (Drafter::DeferPrompt). True only when this controller expects the request to
  // decode plainly throughout: it decodes plainly now, and the probe due at this request's warm-up
  // end (while drafting could pay or nothing is measured, or a max-gap re-check) is none or does
  // not fit the request's exploration budget. A request that defers makes no probe. It books the
  // prompt's rows as deferred, so that a switch later in the request prices the catch-up over them.
  bool DeferPrompt(int64_t prompt_rows, int64_t tokens_left = -1);
  int64_t k_max() const { return k_max_; }
  double exploration_budget() const { return budget_; }
  int64_t requests() const { return requests_; }
  // The k for the next cycle (0 … k_max).
  int64_t Choose();
  // How many tokens the request may still produce (its max-new-tokens budget minus those made);
  // the exploration budget then covers the whole request (see the header). Negative: unknown.
  void SetTokensLeft(int64_t tokens) { tokens_left_ = tokens; }
  // Whether the last Choose() returned an exploration probe rather than the best estimate.
  bool last_was_probe() const { return last_was_probe_; }
  int64_t probes() const { return probes_; }
  // The choice the estimates make now (no probing, no state change).
  int64_t Best() const;

  // A verify of `drafted` tokens that accepted `accepted`, taking the given seconds.
  void RecordVerify(int64_t drafted, int64_t accepted, double verify_seconds);
  // Seconds per proposed token of one Propose (without any catch-up extend it reported).
  void RecordDraftStep(double seconds_per_step);
  // Seconds the drafter spent at Observe after a cycle that drafted (its per-cycle extend).
  void RecordExtend(double seconds);
  // Seconds a Propose spent catching up on rows the drafter deferred during plain steps.
  void RecordCatchUp(double seconds);
  // The wall time of one whole cycle that drafted `drafted` tokens: draft, verify, sampling,
  // commit and the drafter's extend, without any catch-up. Once a length has such samples, its cost
  // is the median of its last kCycleWindow samples that are at most kCycleMaxAge cycles old (else
  // its latest sample): that includes every per-cycle overhead the parts miss and ignores
  // scheduler spikes on a shared machine. A drafting length without samples is priced from the
  // parts, scaled by how far the parts missed the whole cycles of the last measured drafting length.
  void RecordCycle(int64_t drafted, double seconds);
  double exploration_seconds() const { return exploration_; }
  double elapsed_seconds() const { return elapsed_; }

  double ExpectedTokens(int64_t k) const;
  // E[tokens](k) with each acceptance one posterior standard deviation below its mean: what leaving
  // plain decoding is judged by, so that a lucky run of early acceptances near a tie does not buy a
  // switch (and its catch-up) that the true rates do not repay.
  double ExpectedTokensLow(int64_t k) const;
  // E[tokens](k) with each acceptance one posterior standard deviation above its mean (at most 1),
  // and positions after the first at most the first's: what continued exploring is judged by.
  // (Conditional acceptance falls with the position in every measurement we have, and k = 1 probes
  // measure only the first position.)
  double ExpectedTokensHigh(int64_t k) const;
  double ExpectedCost(int64_t k) const;
  double VerifyCost(int64_t rows) const;
  // The cost model's price of a tree cycle (spec/tree_loop.h), in seconds: a verify of `rows` rows
  // (the pending token and every node; lengths past the measured range extend the slope of the two
  // longest), `draft_steps` draft steps (a tree's drafter makes one head and one forward per depth,
  // each priced as a chain's draft step) and the cycle's extend. The chain tree of k nodes with k
  // draft steps is priced exactly as draft length k: TreeCycleCost(k + 1, k) equals the parts of
  // ExpectedCost(k).
  double TreeCycleCost(int64_t rows, int64_t draft_steps) const;
  double conditional_acceptance(int64_t position) const;

 private:
  int64_t k_max_;
  int64_t base_gap_, max_gap_;
  double budget_;             // fraction of the decoded time probes may lose
  int64_t gap_;               // cycles between probes now
  int64_t since_probe_ = 0;   // cycles since the last probe (or the last change of choice)
  int64_t current_ = 0;       // the choice being exploited
  bool last_was_probe_ = false;
  int64_t probes_ = 0;
  bool probe_longer_ = false;  // the next probe while drafting tries one draft more (else plain)
  int64_t burst_left_ = 0;    // follow-up k = 1 probes still due after the last one
  int64_t tokens_left_ = -1;  // the request's remaining token budget; < 0: unknown
  bool prompt_deferred_ = false;  // DeferPrompt let the drafter skip this request's prompt: no probes
  double banked_ = 0;             // a carried controller's budget left unspent by the last request
  std::vector<double> accept_hits_, accept_trials_;  // [k_max] conditional, with a Beta(1,1) prior
  // [k_max + 2] seconds by rows; 0 = unmeasured. A moving average whose new sample weighs
  // min(1, 0.2 · cycles since that length was last measured): lengths measured every cycle are
  // smoothed, a probe's rare measurement replaces a stale value.
  std::vector<double> verify_cost_;
  std::vector<int64_t> verify_cycle_;                // [k_max + 2] cycle of the last measurement
  int64_t cycle_ = 0;                                // verifies recorded
  int64_t warm_up_left_ = kWarmUpPlainSteps;         // plain warm-up cycles still due in this request
  int64_t requests_ = 1;                             // requests this controller has served
  bool skip_cycle_sample_ = false;                   // the last verify was a carried controller's cold warm-up step
  double draft_cost_ = 0;                            // EMA seconds per draft step; 0 = unmeasured
  double extend_cost_ = 0;                           // EMA seconds per drafting cycle's extend
  double catch_up_per_row_ = 0;                      // EMA catch-up seconds per deferred row
  int64_t rows_since_draft_ = 0;                     // rows committed by plain steps since a draft
  double elapsed_ = 0;                               // seconds of every recorded cycle
  double exploration_ = 0;                           // estimated loss of the probes so far
  static constexpr size_t kCycleWindow = 9;
  static constexpr int64_t kCycleMaxAge = 64;
  struct CycleSample {
    int64_t cycle;   // the verify count when it was recorded
    double seconds;
  };
  std::vector<std::vector<CycleSample>> cycle_samples_;  // [k_max + 1][≤ kCycleWindow] recent whole cycles
  std::vector<size_t> cycle_next_;                       // [k_max + 1] ring-buffer write positions
  int64_t last_measured_draft_k_ = 0;                    // the drafting length with the newest sample
  // Position i's conditional acceptance `deviations` posterior standard deviations below its mean,
  // within [0, 1].
  double AcceptanceBound(int64_t i, double deviations) const;
  // E[tokens](k) with every acceptance at AcceptanceBound(i, deviations); with `cap_at_first`, no
  // later position above the first.
  double ExpectedTokensFrom(int64_t k, double deviations, bool cap_at_first) const;
  double SecondsPerToken(int64_t k) const;  // expected seconds per token at draft length k
  double ComposedCost(int64_t k) const;
  double MeasuredCycleCost(int64_t k) const;  // 0 when k has no whole-cycle sample
  double ProbeLoss(int64_t k, double tokens, double seconds) const;
  // The prior of a draft step, a drafting cycle's extend or a catch-up before one is measured:
  // kPriorDraftStep plain steps.
  double PriorStep() const;
  // Catch-up seconds per deferred row: measured, else half a drafting cycle's extend, else 0.
  double CatchUpPerRow() const;
  // Whether some draft length could still beat plain decoding with optimistic acceptance.
  bool DraftingCouldPay() const;
  // Whether a probe of length `probe` while exploiting `best` fits the request's exploration budget,
  // with `deferred_rows` for the drafter to catch up on, `elapsed` seconds decoded and `tokens_left`
  // tokens still to come (negative: unknown).
  bool ProbeFitsBudget(int64_t best, int64_t probe, int64_t deferred_rows, double elapsed, int64_t tokens_left) const;
};

}  // namespace mtpspec
