#include "spec/adaptive_k.h"

#include <algorithm>
#include <cmath>

namespace mtpspec {

constexpr double kEmaWeight = 0.2;

namespace {

// Samples above twice the current average are clipped there first: a preempted measurement on a
// shared machine (often 10× long) then moves an average by at most kEmaWeight of it.
double Clip(double average, double sample) { return average > 0 ? std::min(sample, 2 * average) : sample; }

double Ema(double average, double sample) {
  return average > 0 ? (1 - kEmaWeight) * average + kEmaWeight * Clip(average, sample) : sample;
}

}  // namespace

AdaptiveK::AdaptiveK(int64_t k_max, int64_t probe_interval, int64_t max_probe_interval, double exploration_budget)
    : k_max_(k_max),
      base_gap_(std::max<int64_t>(1, probe_interval)),
      max_gap_(std::max(max_probe_interval, std::max<int64_t>(1, probe_interval))),
      budget_(exploration_budget),
      // Probes start once the warm-up is measured (and the budget allows).
      gap_(1),
      accept_hits_(k_max, 0.0),
      accept_trials_(k_max, 0.0),
      verify_cost_(k_max + 2, 0.0),
      verify_cycle_(k_max + 2, 0),
      cycle_samples_(k_max + 1),
      cycle_next_(k_max + 1, 0) {}

double AdaptiveK::conditional_acceptance(int64_t i) const {
  return (accept_hits_[i] + 1.0) / (accept_trials_[i] + 2.0);  // posterior mean under Beta(1, 1)
}

double AdaptiveK::AcceptanceBound(int64_t i, double deviations) const {
  const double a = conditional_acceptance(i);
  const double sd = std::sqrt(a * (1 - a) / (accept_trials_[i] + 3.0));  // Beta(h + 1, t − h + 1)
  return std::clamp(a - deviations * sd, 0.0, 1.0);
}

double AdaptiveK::ExpectedTokensFrom(int64_t k, double deviations, bool cap_at_first) const {
  double total = 1.0, reach = 1.0;
  const double first = k > 0 ? AcceptanceBound(0, deviations) : 1.0;
  for (int64_t i = 0; i < k; ++i) {
    const double a = AcceptanceBound(i, deviations);
    reach *= cap_at_first ? std::min(a, first) : a;
    total += reach;
  }
  return total;
}

double AdaptiveK::ExpectedTokens(int64_t k) const { return ExpectedTokensFrom(k, 0.0, false); }

double AdaptiveK::ExpectedTokensLow(int64_t k) const { return ExpectedTokensFrom(k, 1.0, false); }

double AdaptiveK::ExpectedTokensHigh(int64_t k) const { return ExpectedTokensFrom(k, -1.0, true); }

double AdaptiveK::VerifyCost(int64_t rows) const {
  if (verify_cost_[rows] > 0) return verify_cost_[rows];
  const int64_t size = static_cast<int64_t>(verify_cost_.size());
  int64_t below = -1, above = -1;
  for (int64_t r = rows - 1; r >= 1 && below < 0; --r) below = verify_cost_[r] > 0 ? r : -1;
  for (int64_t r = rows + 1; r < size && above < 0; ++r) above = verify_cost_[r] > 0 ? r : -1;
  if (below > 0 && above > 0) {  // interpolate
    const double t = static_cast<double>(rows - below) / static_cast<double>(above - below);
    return verify_cost_[below] * (1 - t) + verify_cost_[above] * t;
  }
  if (below > 0) {  // extrapolate along the two longest measured lengths, else at r = L
    int64_t lower = -1;
    for (int64_t r = below - 1; r >= 1 && lower < 0; --r) lower = verify_cost_[r] > 0 ? r : -1;
    const double slope = lower > 0 ? (verify_cost_[below] - verify_cost_[lower]) / static_cast<double>(below - lower)
                                   : verify_cost_[below] / static_cast<double>(below);
    return verify_cost_[below] + std::max(0.0, slope) * static_cast<double>(rows - below);
  }
  if (above > 0) return verify_cost_[above];
  return static_cast<double>(rows);  // nothing measured yet: r = L, in units of the unmeasured plain step
}

double AdaptiveK::ComposedCost(int64_t k) const {
  if (k == 0) return VerifyCost(1);
  return VerifyCost(k + 1) + static_cast<double>(k) * draft_cost_ + extend_cost_;
}

double AdaptiveK::TreeCycleCost(int64_t rows, int64_t draft_steps) const {
  const int64_t longest = static_cast<int64_t>(verify_cost_.size()) - 1;
  double verify = 0;
  if (rows <= longest) {
    verify = VerifyCost(rows);
  } else {
    const double last = VerifyCost(longest), before = VerifyCost(longest - 1);
    verify = last + std::max(0.0, last - before) * static_cast<double>(rows - longest);
  }
  if (draft_steps == 0) return verify;
  return verify + static_cast<double>(draft_steps) * draft_cost_ + extend_cost_;
}

double AdaptiveK::MeasuredCycleCost(int64_t k) const {
  const std::vector<CycleSample>& samples = cycle_samples_[k];
  if (samples.empty()) return 0;
  std::vector<double> recent;  // [≤ kCycleWindow]
  const CycleSample* latest = &samples[0];
  for (const CycleSample& sample : samples) {
    if (cycle_ - sample.cycle <= kCycleMaxAge) recent.push_back(sample.seconds);
    if (sample.cycle > latest->cycle) latest = &sample;
  }
  if (recent.empty()) return latest->seconds;
  const auto mid = recent.begin() + static_cast<std::ptrdiff_t>(recent.size() / 2);
  std::nth_element(recent.begin(), mid, recent.end());
  return *mid;  // the upper median for an even count: a rarely measured length is priced cautiously
}

double AdaptiveK::ExpectedCost(int64_t k) const {
  const double measured = MeasuredCycleCost(k);
  if (measured > 0) return measured;
  const double composed = ComposedCost(k);
  if (k == 0 || last_measured_draft_k_ == 0) return composed;
  // Scale the parts by how far they missed the newest measured drafting length's whole cycles.
  const double scale = MeasuredCycleCost(last_measured_draft_k_) / ComposedCost(last_measured_draft_k_);
  return composed * std::clamp(scale, 0.5, 4.0);
}

void AdaptiveK::RecordCycle(int64_t drafted, double seconds) {
  if (drafted < 0 || drafted > k_max_ || !(seconds > 0) || skip_cycle_sample_) return;
  std::vector<CycleSample>& samples = cycle_samples_[drafted];
  const CycleSample sample{cycle_, seconds};
  if (samples.size() < kCycleWindow) {
    samples.push_back(sample);
  } else {
    samples[cycle_next_[drafted]] = sample;
  }
  cycle_next_[drafted] = (cycle_next_[drafted] + 1) % kCycleWindow;
  if (drafted > 0) last_measured_draft_k_ = drafted;
}

int64_t AdaptiveK::Best() const {
  int64_t best = 0;
  double best_rate = ExpectedTokens(0) / ExpectedCost(0);
  // Ramp: k drafts need a measured verify of k rows (k − 1 drafts), the longest one measured so far.
  int64_t longest = 1;
  for (int64_t rows = 2; rows < static_cast<int64_t>(verify_cost_.size()); ++rows) {
    if (verify_cost_[rows] > 0) longest = rows;
  }
  for (int64_t k = 1; k <= std::min(k_max_, longest); ++k) {
    const double rate = ExpectedTokens(k) / ExpectedCost(k);
    if (rate > best_rate) {
      best_rate = rate;
      best = k;
    }
  }
  return best;
}

void AdaptiveK::BeginRequest() {
  if (cycle_ == 0) return;  // nothing learned yet: a fresh controller
  ++requests_;
  banked_ = std::max(0.0, budget_ * elapsed_ - exploration_);  // what the last request left unspent
  elapsed_ = 0;
  exploration_ = 0;
  tokens_left_ = -1;
  burst_left_ = 0;
  rows_since_draft_ = 0;  // the drafter extends its cache over the whole prompt at the prefill
  last_was_probe_ = false;
  prompt_deferred_ = false;
  warm_up_left_ = kWarmUpPlainSteps;
}

bool AdaptiveK::DeferPrompt(int64_t prompt_rows, int64_t tokens_left) {
  if (current_ != 0) return false;
  // A probe comes at this request's warm-up end while drafting could still pay (always, while
  // nothing is measured), or when a max-gap re-check of drafting that cannot pay is due (a carried
  // controller makes it there and nowhere else in a request). The request keeps the prompt for it
  // unless its budget cannot pay for it, judged as Choose will judge it then, after the warm-up's
  // plain steps (a probe later in the request has more rows to catch up on, so it would not fit
  // either). Without the request's length the budget cannot be judged ahead: keep the prompt.
  if (DraftingCouldPay() || since_probe_ + 1 >= max_gap_) {
    if (tokens_left < 0) return false;
    const double warm_up = static_cast<double>(kWarmUpPlainSteps);
    const int64_t left = std::max<int64_t>(0, tokens_left - kWarmUpPlainSteps);
    if (ProbeFitsBudget(0, std::min<int64_t>(1, k_max_), kWarmUpPlainSteps, warm_up * ExpectedCost(0), left)) {
      return false;
    }
  }
  rows_since_draft_ = std::max<int64_t>(0, prompt_rows);
  prompt_deferred_ = true;
  return true;
}

bool AdaptiveK::ProbeFitsBudget(int64_t best, int64_t probe, int64_t deferred_rows, double elapsed,
                                int64_t tokens_left) const {
  // Parts of a drafting cycle not measured yet are priced at a prior step each (see the header):
  // a draft step, the cycle's extend, and the catch-up over the deferred rows.
  double catch_up = 0, priors = 0;
  if (probe > 0) {
    const double per_row = CatchUpPerRow();
    catch_up = per_row > 0 ? static_cast<double>(deferred_rows) * per_row : (deferred_rows > 0 ? PriorStep() : 0.0);
    priors = (draft_cost_ <= 0 ? PriorStep() : 0.0) + (extend_cost_ <= 0 ? PriorStep() : 0.0);
  }
  const double loss = ProbeLoss(best, ExpectedTokens(probe), ExpectedCost(probe) + priors) + catch_up;
  const double planned = tokens_left > 0 ? static_cast<double>(tokens_left) * SecondsPerToken(best) : 0.0;
  return exploration_ + loss <= budget_ * (elapsed + planned) + banked_;
}

int64_t AdaptiveK::Choose() {
  last_was_probe_ = false;
  if (warm_up_left_ > 0) return 0;  // a few plain steps first
  int64_t best = Best();
  if (current_ == 0 && best > 0) {
    const double rate = ExpectedTokensLow(best) / ExpectedCost(best);
    const double plain_rate = ExpectedTokens(0) / ExpectedCost(0);
    // Seconds saved per drafting cycle (its tokens at the plain rate minus its cost), over the
    // horizon, against the one-off catch-up over the rows deferred since the last draft.
    const double saving = ExpectedTokensLow(best) / plain_rate - ExpectedCost(best);
    const double catch_up = static_cast<double>(rows_since_draft_) * CatchUpPerRow();
    if (rate < (1 + kSwitchMargin) * plain_rate || saving * static_cast<double>(kSwitchHorizon) < catch_up) {
      best = 0;  // within the margin, or not worth the catch-up: stay plain
    }
  }
  if ((best == 0) != (current_ == 0)) {  // the regime changed: explore its alternative soon again
    gap_ = base_gap_;
    since_probe_ = 0;
    burst_left_ = 0;
  }
  current_ = best;
  // The follow-ups of a k = 1 probe come on the next cycles: the drafter has just caught up.
  const bool follow_up = best == 0 && burst_left_ > 0;
  if (!follow_up && ++since_probe_ < gap_) return best;  // (a burst's cycles do not count toward the gap)
  // While drafting, probes alternate between plain decoding and one draft more (whose deeper
  // position the current length never measures), unless the current length is k_max.
  int64_t probe = best == 0 ? std::min<int64_t>(1, k_max_) : 0;
  if (best > 0 && best < k_max_ && probe_longer_) probe = best + 1;
  // (Drafting that cannot pay is still re-checked every max_probe_interval cycles, as far as the
  // budget allows: acceptance may change with the text.)
  // (A request whose prompt the drafter deferred makes no probe: DeferPrompt judged it would not.)
  bool allowed = !prompt_deferred_ && (probe == 0 || DraftingCouldPay());
  if (!allowed && since_probe_ >= max_gap_) {
    // A controller carried across requests (requests_ > 1) makes that re-check right after some
    // request's warm-up, when the drafter has only the warm-up rows to catch up on; mid-request
    // the catch-up over every row since then would make it far dearer.
    allowed = requests_ == 1 || rows_since_draft_ <= kWarmUpPlainSteps;
  }
  if (allowed) {  // within the exploration budget of the request? (the first probe too, priced from the priors)
    allowed = ProbeFitsBudget(best, probe, rows_since_draft_, elapsed_, tokens_left_);
  }
  if (!allowed) {
    burst_left_ = 0;
    return best;
  }
  if (follow_up) {
    --burst_left_;
  } else {
    since_probe_ = 0;
    gap_ = std::min(gap_ == 1 ? base_gap_ : 2 * gap_, max_gap_);
    burst_left_ = best == 0 && probe > 0 ? kProbeBurst - 1 : 0;
    if (best > 0) probe_longer_ = !probe_longer_;
  }
  last_was_probe_ = true;
  ++probes_;
  return probe;
}

double AdaptiveK::PriorStep() const { return kPriorDraftStep * VerifyCost(1); }

double AdaptiveK::CatchUpPerRow() const {
  if (catch_up_per_row_ > 0) return catch_up_per_row_;
  // Not measured yet (the probes so far found the drafter caught up): a drafting cycle's extend
  // covers one or two committed rows, so half of it per row.
  return extend_cost_ / 2;
}

bool AdaptiveK::DraftingCouldPay() const {
  if (verify_cost_[2] <= 0 || draft_cost_ <= 0) return true;  // k = 1 not measured yet: probe
  const double plain_rate = ExpectedTokens(0) / ExpectedCost(0);
  for (int64_t k = 1; k <= k_max_; ++k) {
    if (ExpectedTokensHigh(k) / ExpectedCost(k) >= (1 + kSwitchMargin) * plain_rate) return true;
  }
  return false;
}

double AdaptiveK::SecondsPerToken(int64_t k) const { return ExpectedCost(k) / ExpectedTokens(k); }

double AdaptiveK::ProbeLoss(int64_t best, double tokens, double seconds) const {
  return std::max(0.0, seconds - tokens * SecondsPerToken(best));
}

void AdaptiveK::RecordVerify(int64_t drafted, int64_t accepted, double seconds) {
  for (int64_t i = 0; i < drafted && i <= accepted; ++i) {
    accept_trials_[i] += 1.0;
    if (i < accepted) accept_hits_[i] += 1.0;
  }
  ++cycle_;
  double& cost = verify_cost_[drafted + 1];
  skip_cycle_sample_ = false;
  if (drafted == 0 && warm_up_left_ > 0) {  // cold first steps
    --warm_up_left_;
    verify_cycle_[1] = cycle_;
    // The first request prices plain decoding at the fastest of them; a carried controller already
    // knows the steady cost and records neither their verify nor their cycle.
    if (requests_ == 1) cost = cost > 0 ? std::min(cost, seconds) : seconds;
    skip_cycle_sample_ = requests_ > 1;
  } else {
    const double weight = std::min(1.0, kEmaWeight * static_cast<double>(cycle_ - verify_cycle_[drafted + 1]));
    cost = cost > 0 ? (1 - weight) * cost + weight * (weight < 1 ? Clip(cost, seconds) : seconds) : seconds;
    verify_cycle_[drafted + 1] = cycle_;
  }
  const double cycle = seconds + (drafted > 0 ? static_cast<double>(drafted) * draft_cost_ + extend_cost_ : 0.0);
  elapsed_ += cycle;
  if (last_was_probe_) exploration_ += ProbeLoss(current_, static_cast<double>(accepted + 1), cycle);
  rows_since_draft_ = drafted > 0 ? 0 : rows_since_draft_ + accepted + 1;
}

void AdaptiveK::RecordCatchUp(double seconds) {
  elapsed_ += seconds;
  if (last_was_probe_) exploration_ += seconds;
  if (rows_since_draft_ > 0) {
    const double per_row = seconds / static_cast<double>(rows_since_draft_);
    catch_up_per_row_ = catch_up_per_row_ > 0 ? (1 - kEmaWeight) * catch_up_per_row_ + kEmaWeight * per_row : per_row;
  }
}

void AdaptiveK::RecordDraftStep(double seconds) { draft_cost_ = Ema(draft_cost_, seconds); }

void AdaptiveK::RecordExtend(double seconds) { extend_cost_ = Ema(extend_cost_, seconds); }

}  // namespace mtpspec
