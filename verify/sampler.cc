#include "verify/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "core/philox.h"

namespace mtpspec {

absl::Status ValidateSamplingParams(const SamplingParams& p) {
  if (!(p.temperature >= 0.0) || !std::isfinite(p.temperature)) {
    return absl::InvalidArgumentError(absl::StrCat("temperature must be a finite number >= 0, got ", p.temperature));
  }
  if (p.top_k < 0) return absl::InvalidArgumentError(absl::StrCat("top_k must be >= 0, got ", p.top_k));
  if (!(p.top_p > 0.0 && p.top_p <= 1.0)) {
    return absl::InvalidArgumentError(absl::StrCat("top_p must be in (0, 1], got ", p.top_p));
  }
  if (!(p.min_p >= 0.0 && p.min_p <= 1.0)) {
    return absl::InvalidArgumentError(absl::StrCat("min_p must be in [0, 1], got ", p.min_p));
  }
  return absl::OkStatus();
}

int32_t Argmax(const float* logits, int64_t vocab) {
  int64_t best = 0;
  for (int64_t i = 1; i < vocab; ++i) {
    if (logits[i] > logits[best]) best = i;
  }
  return static_cast<int32_t>(best);
}

void SamplingDistribution(const float* logits, int64_t vocab, const SamplingParams& params,
                          std::vector<double>* probs) {
  probs->assign(vocab, 0.0);
  if (params.greedy()) {
    (*probs)[Argmax(logits, vocab)] = 1.0;
    return;
  }
  double max_logit = -INFINITY;
  for (int64_t i = 0; i < vocab; ++i) max_logit = std::max(max_logit, static_cast<double>(logits[i]));
  double total = 0.0;
  for (int64_t i = 0; i < vocab; ++i) {
    (*probs)[i] = std::exp((static_cast<double>(logits[i]) - max_logit) / params.temperature);
    total += (*probs)[i];
  }
  for (double& p : *probs) p /= total;

  // Filters act on the tempered distribution. Order by probability (ties by index) once.
  const bool filter = params.top_k > 0 || params.top_p < 1.0 || params.min_p > 0.0;
  if (!filter) return;
  std::vector<int32_t> order(vocab);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return (*probs)[a] > (*probs)[b]; });
  int64_t keep = vocab;
  if (params.top_k > 0) keep = std::min<int64_t>(keep, params.top_k);
  if (params.top_p < 1.0) {
    // Smallest prefix whose mass reaches top_p of what top-k kept (top-p acts on the renormalised
    // top-k set, as transformers and vLLM apply the two filters in sequence).
    double kept_mass = 0.0;
    for (int64_t i = 0; i < keep; ++i) kept_mass += (*probs)[order[i]];
    double mass = 0.0;
    for (int64_t i = 0; i < keep; ++i) {
      mass += (*probs)[order[i]];
      if (mass >= params.top_p * kept_mass) {
        keep = i + 1;
        break;
      }
    }
  }
  if (params.min_p > 0.0) {
    const double floor = params.min_p * (*probs)[order[0]];
    int64_t i = 1;
    while (i < keep && (*probs)[order[i]] >= floor) ++i;
    keep = i;
  }
  double kept = 0.0;
  for (int64_t i = 0; i < keep; ++i) kept += (*probs)[order[i]];
  for (int64_t i = keep; i < vocab; ++i) (*probs)[order[i]] = 0.0;
  for (int64_t i = 0; i < keep; ++i) (*probs)[order[i]] /= kept;
}

int32_t DrawFrom(const std::vector<double>& probs, double u) {
  double cumulative = 0.0;
  int32_t last_positive = 0;
  for (size_t i = 0; i < probs.size(); ++i) {
    if (probs[i] <= 0.0) continue;
    cumulative += probs[i];
    last_positive = static_cast<int32_t>(i);
    if (u < cumulative) return last_positive;
  }
  return last_positive;  // u fell in the rounding gap at the top
}

bool RemoveAndRenormalize(std::vector<double>* q, int32_t d) {
  (*q)[d] = 0.0;
  double left = 0.0;
  for (double x : *q) left += x;
  if (!(left > 0.0)) {
    q->assign(q->size(), 0.0);
    return false;
  }
  for (double& x : *q) x /= left;
  return true;
}

std::vector<int32_t> DrawWithoutReplacement(std::vector<double> q, const std::vector<double>& uniforms) {
  std::vector<int32_t> drawn;
  for (double u : uniforms) {
    const int32_t d = DrawFrom(q, u);
    if (!(q[d] > 0.0)) break;  // no mass left to draw from
    drawn.push_back(d);
    if (!RemoveAndRenormalize(&q, d)) break;
  }
  return drawn;
}

int32_t SampleToken(const float* logits, int64_t vocab, const SamplingParams& params, int64_t position) {
  if (params.greedy()) return Argmax(logits, vocab);
  std::vector<double> probs;
  SamplingDistribution(logits, vocab, params, &probs);
  return DrawFrom(probs, UniformAt(params.seed, static_cast<uint64_t>(position),
                                   static_cast<uint32_t>(RngStream::kTarget)));
}

}  // namespace mtpspec
