// Adaptive k: each cycle, pick the draft length (0 = plain decoding) that maximises the expected
// tokens per second, from online estimates of per-position acceptance and of the measured costs:
//   E[tokens](k) = 1 + Σ_{i ≤ k} Π_{j ≤ i} a_j
//   cost(0) = Tv(1),   cost(k ≥ 1) = Tv(k + 1) + k · c + x
// where Tv(L) is a verify of L rows, c one draft step and x the drafter's per-cycle extend of the
// committed rows (booked at Observe, not as a draft step). Pick argmax E / cost.
//
// Start: the first kWarmUpPlainSteps cycles decode plainly without probing, and while a plain
// step has fewer samples than that its cost is their minimum: the first decode steps after a
// prefill run cold (scratch buffers, caches) at up to 3x the steady cost, and one such sample
// would price plain decoding, and every verify length extrapolated from it, far too high.
// Ramp: a draft length k is considered only once a verify of k rows has been measured (k − 1
// drafts), so the controller grows k one step at a time and never jumps on extrapolated costs.
//
// Unmeasured verify lengths are interpolated between measured ones, extrapolated along the slope
// of the two longest measured ones, and, while only the plain step is measured, priced
// conservatively at r = L (Tv(L) = L · Tv(1)): drafting must prove itself through probes.
//
// Exploration: the controller keeps the choice it would make and, every `gap` cycles, spends
// cycles on an alternative:
// - while decoding plainly, a burst of up to kProbeBurst k = 1 cycles (to learn acceptance, Tv(2),
//   c and x): the first pays the drafter's catch-up over the rows it deferred, the rest learn
//   acceptance without one;
// - while drafting k, one cycle of alternately k = 0 (to re-measure the plain step, whose cost
//   drifts with the context) and k + 1 (the one position k never reaches).
// A probe that leaves the choice unchanged doubles the gap (up to `max_probe_interval`) and a change
// of choice resets it, so probes cost O(log cycles) in a stable regime.
// Budget: a probe, the first one included, is made only while the estimated loss of all probes so
// far plus this one stays within kExplorationBudget of the request's decode time: the time decoded
// so far plus, once the caller has said how many tokens the request may still produce
// (SetTokensLeft), those tokens at the current best rate. A probe's loss is its cycle cost minus
// what its tokens would have cost at the best rate, plus the drafter's catch-up it triggers
// (reported through RecordCatchUp; estimated per row from earlier catch-ups, or from the extend of
// the drafting cycles when no catch-up has been measured yet). Parts not measured yet are priced
// from priors: Tv(2) = 2 Tv(1); a draft step, the cycle's extend and the catch-up at kPriorDraftStep
// plain steps each; a = 1/2. The first probe is thus priced at a loss of 2 plain steps, so it comes
// right after the warm-up (while the drafter has only the warm-up rows to catch up on) in a request
// with ≥ 197 tokens left, and not at all in a shorter one. The priors are set above the dearest
// first probe measured: on models/glm-tiny-mtp, whose MTP layer and head are a large share of a
// step, it lost 1.3 plain steps (bench/observe_ab); priced at 1 it would come in 128-token requests
// and lose them 1-2.5% against their 1% budget. A fresh controller
// whose request is too short for it lets the drafter defer the prompt (DeferPrompt). (Without
// SetTokensLeft the budget grows with the decoded time only, and the first probe comes after ~200
// plain steps.)
// Stopping: once a probe has measured the drafting costs, plain decoding is probed again only while
// drafting could still win: some k must beat the plain rate by kSwitchMargin with every acceptance
// one posterior standard deviation high (ExpectedTokensHigh). Where no acceptance the drafts could
// plausibly reach pays for the measured costs, a probe comes only every `max_probe_interval`
// cycles (acceptance may change with the text), within the budget. When the catch-up alone costs
// more per row than the budget allows, probing stops altogether (the controller then no longer
// notices if drafting starts to pay later in the request).
// Across requests: one controller may serve a series of requests (GenerateOptions::
// adaptive_controller), with BeginRequest() at the start of each. The learned costs, the acceptance
// counts and the probe schedule carry over, so a stable regime costs a probe every
// max_probe_interval cycles instead of a burst in every request (and a due re-check of drafting
// that cannot pay waits for the end of the next request's warm-up, where the drafter's catch-up is
// the shortest). The budget accounting (decoded time, probe losses), the token budget, the
// drafter's deferred rows and the warm-up start afresh, except that the budget the last request
// left unspent is added to this one's (so a series of requests each too short for a probe makes
// one in the second request, which may then lose up to twice its own budget); and a carried
// controller does not record its warm-up steps (they run cold after the prefill and the steady
// costs are known).
// Prompt deferral: a controller that expects a request to decode plainly throughout (DeferPrompt:
// no probe is due at its warm-up's end, where a carried controller has learned drafting does not
// pay, or the request's budget cannot pay for the one that is due, as in a fresh controller's
// short request) lets the drafter skip the prompt's extend at the prefill (Drafter::DeferPrompt).
// That extend runs the MTP layer over every prompt row and evicts the trunk from the cache: on the
// trained model it made the next decode steps' forward 2-5% slower over a 128-token request
// (bench/observe_ab, on a CPU with a 32 MB L3). Requests where a re-check is due, and the request's budget can pay
// for it at the warm-up's end, extend the prompt as before.
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
