#include "spec/batch_k.h"

#include <algorithm>

namespace mtpspec {

double BatchDraftController::Acceptance(int64_t request, int64_t position) const {
  const size_t l = static_cast<size_t>(position - 1);
  const auto rate = [&](const Counts& c, double prior, double weight) {
    const double reached = l < c.reached.size() ? c.reached[l] : 0.0;
    const double accepted = l < c.accepted.size() ? c.accepted[l] : 0.0;
    return (accepted + prior * weight) / (reached + weight);
  };
  const double pooled = rate(pooled_, kPriorAcceptance, kPriorWeight);
  const auto it = requests_.find(request);
  if (it == requests_.end()) return pooled;
  return rate(it->second, pooled, kPriorWeight);
}

double BatchDraftController::ExpectedTokens(int64_t request, int64_t k) const {
  double tokens = 1.0, reach = 1.0;
  for (int64_t j = 1; j <= k; ++j) {
    reach *= Acceptance(request, j);
    tokens += reach;
  }
  return tokens;
}

double BatchDraftController::Median(std::vector<double> samples) {
  const size_t mid = samples.size() / 2;
  std::nth_element(samples.begin(), samples.begin() + mid, samples.end());
  if (samples.size() % 2 == 1) return samples[mid];
  return 0.5 * (samples[mid] + *std::max_element(samples.begin(), samples.begin() + mid));
}

double BatchDraftController::VerifySeconds(int64_t rows, int64_t batch) const {
  if (verify_.empty()) return static_cast<double>(rows);  // nothing measured: only ratios matter
  // Least-squares line through the measured (rows, mean seconds) points, one point per row count.
  double n = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (const auto& [r, samples] : verify_) {
    const double x = static_cast<double>(r), y = Median(samples);
    n += 1;
    sx += x;
    sy += y;
    sxx += x * x;
    sxy += x * y;
  }
  if (verify_.size() == 1) {
    // One row count measured: price extra rows at its mean per row of a plain batch step.
    const auto& [r, samples] = *verify_.begin();
    const double seconds = Median(samples);
    const double per_row = seconds / static_cast<double>(std::max<int64_t>(batch, r));
    return seconds + per_row * static_cast<double>(rows - r);
  }
  const double slope = std::max(0.0, (n * sxy - sx * sy) / (n * sxx - sx * sx));
  const double intercept = (sy - slope * sx) / n;
  return std::max(1e-9, intercept + slope * static_cast<double>(rows));
}

double BatchDraftController::Cost(const std::vector<int64_t>& k, int64_t batch, int64_t other_rows) const {
  int64_t rows = other_rows, depth = 0, extending = 0;
  for (int64_t ki : k) {
    rows += ki + 1;
    depth = std::max(depth, ki);
    extending += ki > 0 ? 1 : 0;
  }
  const double plain = VerifySeconds(batch + other_rows, batch) / static_cast<double>(batch);
  // Unmeasured drafting is priced at a quarter of a plain request's share of a step per depth and
  // per extend, so the first probes can be afforded.
  const double d = draft_depths_ > 0 ? draft_seconds_ / static_cast<double>(draft_depths_) : 0.25 * plain * batch;
  const double x = extends_ > 0 ? extend_seconds_ / static_cast<double>(extends_) : 0.25 * plain;
  return VerifySeconds(rows, batch) + static_cast<double>(depth) * d + static_cast<double>(extending) * x;
}

std::vector<int64_t> BatchDraftController::Best(std::span<const int64_t> requests, std::span<const int64_t> caps,
                                                int64_t other_rows) const {
  const int64_t batch = static_cast<int64_t>(requests.size());
  std::vector<int64_t> best(requests.size(), 0);
  double best_rate = 0;
  {
    double tokens = 0;
    for (int64_t r : requests) tokens += ExpectedTokens(r, 0);
    best_rate = tokens / Cost(best, batch, other_rows);
  }
  for (int64_t cap = 1; cap <= k_max_; ++cap) {
    std::vector<int64_t> k(requests.size(), 0);
    double tokens = static_cast<double>(batch);
    double rate = tokens / Cost(k, batch, other_rows);
    while (true) {  // add the draft of highest expected gain while the rate grows
      int64_t pick = -1;
      double gain = 0;
      for (size_t i = 0; i < requests.size(); ++i) {
        if (k[i] >= std::min(cap, caps[i])) continue;
        const double g = ExpectedTokens(requests[i], k[i] + 1) - ExpectedTokens(requests[i], k[i]);
        if (g > gain) {
          gain = g;
          pick = static_cast<int64_t>(i);
        }
      }
      if (pick < 0) break;
      ++k[pick];
      const double next = (tokens + gain) / Cost(k, batch, other_rows);
      if (next <= rate) {
        --k[pick];
        break;
      }
      tokens += gain;
      rate = next;
    }
    if (rate > best_rate) {
      best_rate = rate;
      best = k;
    }
  }
  return best;
}

std::vector<int64_t> BatchDraftController::Choose(std::span<const int64_t> requests, std::span<const int64_t> caps,
                                                  int64_t other_rows, bool* probe) {
  ++cycles_;
  std::vector<int64_t> k = Best(requests, caps, other_rows);
  *probe = false;
  if (cycles_ >= next_probe_) {
    *probe = true;
    const bool changed = k != last_choice_;
    gap_ = changed ? kFirstGap : std::min(2 * gap_, kMaxGap);
    next_probe_ = cycles_ + gap_;
    last_choice_ = k;
    for (size_t i = 0; i < k.size(); ++i) k[i] = std::min<int64_t>({k[i] + 1, caps[i], k_max_});
    return k;
  }
  return k;
}

void BatchDraftController::RecordCycle(int64_t rows, double verify_seconds, int64_t depth, double draft_seconds,
                                       int64_t extending, double extend_seconds) {
  if (rows > 0 && verify_seconds > 0) {
    std::vector<double>& samples = verify_[rows];
    if (samples.size() == kSamples) samples.erase(samples.begin());
    samples.push_back(verify_seconds);
  }
  if (depth > 0) {
    draft_seconds_ += draft_seconds;
    draft_depths_ += depth;
  }
  if (extending > 0) {
    extend_seconds_ += extend_seconds;
    extends_ += extending;
  }
}

void BatchDraftController::RecordAcceptance(int64_t request, int64_t drafted, int64_t accepted) {
  Counts& own = requests_[request];
  for (Counts* c : {&own, &pooled_}) {
    if (static_cast<int64_t>(c->reached.size()) < k_max_) {
      c->reached.resize(k_max_, 0.0);
      c->accepted.resize(k_max_, 0.0);
    }
    // Position l is reached when every draft before it was accepted.
    for (int64_t l = 0; l < std::min(drafted, k_max_) && l <= accepted; ++l) {
      c->reached[l] += 1;
      if (l < accepted) c->accepted[l] += 1;
    }
  }
}

}  // namespace mtpspec
