#include "verify/acceptance.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "core/philox.h"

namespace mtpspec {
namespace {

double Uniform(const AcceptParams& p, int64_t position, RngStream stream) {
  return UniformAt(p.sampling.seed, static_cast<uint64_t>(position), static_cast<uint32_t>(stream));
}

const float* Row(const VerifyBlock& b, int64_t j) { return b.target_logits + j * b.vocab; }

AcceptResult SamplerEquality(const VerifyBlock& b, const AcceptParams& p) {
  AcceptResult r;
  const int64_t k = static_cast<int64_t>(b.drafts.size());
  for (int64_t j = 0; j <= k; ++j) {
    const int32_t s = SampleToken(Row(b, j), b.vocab, p.sampling, b.first_position + j);
    if (j < k && b.drafts[j] == s) {
      r.tokens.push_back(s);
      ++r.accepted;
      continue;
    }
    r.tokens.push_back(s);
    break;
  }
  return r;
}

AcceptResult Rejection(const VerifyBlock& b, const AcceptParams& p) {
  AcceptResult r;
  const int64_t k = static_cast<int64_t>(b.drafts.size());
  std::vector<double> target;
  for (int64_t j = 0; j < k; ++j) {
    const int64_t position = b.first_position + j;
    SamplingDistribution(Row(b, j), b.vocab, p.sampling, &target);
    const int32_t d = b.drafts[j];
    const bool has_q = b.draft_probs != nullptr && !b.draft_probs->empty();
    const double q_d = has_q ? (*b.draft_probs)[j][d] : 1.0;
    const double ratio = q_d > 0.0 ? target[d] / q_d : 0.0;
    if (Uniform(p, position, RngStream::kAccept) < std::min(1.0, ratio)) {
      r.tokens.push_back(d);
      ++r.accepted;
      continue;
    }
    // Resample from normalize(max(0, p − q)).
    std::vector<double> residual(b.vocab);
    double mass = 0.0;
    for (int64_t v = 0; v < b.vocab; ++v) {
      const double q_v = has_q ? (*b.draft_probs)[j][v] : (v == d ? 1.0 : 0.0);
      residual[v] = std::max(0.0, target[v] - q_v);
      mass += residual[v];
    }
    if (mass <= 0.0) {
      residual = target;  // p == q: any rejection is a rounding event; fall back to p
      mass = 1.0;
    }
    for (double& x : residual) x /= mass;
    r.tokens.push_back(DrawFrom(residual, Uniform(p, position, RngStream::kResidual)));
    return r;
  }
  r.tokens.push_back(SampleToken(Row(b, k), b.vocab, p.sampling, b.first_position + k));  // bonus
  return r;
}

AcceptResult Relaxed(const VerifyBlock& b, const AcceptParams& p) {
  AcceptResult r;
  const int64_t k = static_cast<int64_t>(b.drafts.size());
  SamplingParams plain = p.sampling;
  plain.temperature = p.sampling.greedy() ? 1.0 : p.sampling.temperature;
  plain.top_k = 0;
  plain.top_p = 1.0;
  plain.min_p = 0.0;
  std::vector<double> probs;
  for (int64_t j = 0; j < k; ++j) {
    SamplingDistribution(Row(b, j), b.vocab, plain, &probs);
    const int32_t d = b.drafts[j];
    const double top1 = *std::max_element(probs.begin(), probs.end());
    int64_t rank = 0;
    for (int64_t v = 0; v < b.vocab; ++v) rank += probs[v] > probs[d] || (probs[v] == probs[d] && v < d);
    if (rank < p.relaxed_top_n && probs[d] >= top1 - p.relaxed_delta) {
      r.tokens.push_back(d);
      ++r.accepted;
      continue;
    }
    r.tokens.push_back(SampleToken(Row(b, j), b.vocab, p.sampling, b.first_position + j));
    return r;
  }
  r.tokens.push_back(SampleToken(Row(b, k), b.vocab, p.sampling, b.first_position + k));
  return r;
}

AcceptResult Synthetic(const VerifyBlock& b, const AcceptParams& p) {
  AcceptResult r;
  const int64_t k = static_cast<int64_t>(b.drafts.size());
  for (int64_t j = 0; j < k; ++j) {
    const double rate = j < static_cast<int64_t>(p.synthetic_rates.size()) ? p.synthetic_rates[j]
                        : p.synthetic_rates.empty()                          ? 0.0
                                                                            : p.synthetic_rates.back();
    if (Uniform(p, b.first_position + j, RngStream::kAccept) < rate) {
      r.tokens.push_back(b.drafts[j]);
      ++r.accepted;
      continue;
    }
    r.tokens.push_back(SampleToken(Row(b, j), b.vocab, p.sampling, b.first_position + j));
    return r;
  }
  r.tokens.push_back(SampleToken(Row(b, k), b.vocab, p.sampling, b.first_position + k));
  return r;
}

}  // namespace

const char* AcceptRuleName(AcceptRule rule) {
  switch (rule) {
    case AcceptRule::kSamplerEquality: return "sampler-equality";
    case AcceptRule::kRejection: return "rejection";
    case AcceptRule::kRelaxed: return "relaxed";
    case AcceptRule::kSynthetic: return "synthetic";
  }
  return "?";
}

absl::StatusOr<AcceptRule> ParseAcceptRule(const std::string& name) {
  for (AcceptRule r : {AcceptRule::kSamplerEquality, AcceptRule::kRejection, AcceptRule::kRelaxed,
                       AcceptRule::kSynthetic}) {
    if (name == AcceptRuleName(r)) return r;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown acceptance rule \"", name,
                                                 "\" (sampler-equality, rejection, relaxed, synthetic)"));
}

absl::StatusOr<AcceptResult> AcceptBySamples(std::span<const int32_t> drafts, std::span<const int32_t> samples) {
  if (samples.size() != drafts.size() + 1) {
    return absl::InvalidArgumentError(absl::StrCat("AcceptBySamples: ", samples.size(), " samples for ", drafts.size(),
                                                   " drafts (expected drafts + 1)"));
  }
  AcceptResult r;
  while (r.accepted < static_cast<int64_t>(drafts.size()) && drafts[r.accepted] == samples[r.accepted]) {
    r.tokens.push_back(drafts[r.accepted]);
    ++r.accepted;
  }
  r.tokens.push_back(samples[r.accepted]);
  return r;
}

AcceptResult AcceptDrafts(const VerifyBlock& block, const AcceptParams& params) {
  switch (params.rule) {
    case AcceptRule::kSamplerEquality: return SamplerEquality(block, params);
    case AcceptRule::kRejection: return Rejection(block, params);
    case AcceptRule::kRelaxed: return Relaxed(block, params);
    case AcceptRule::kSynthetic: return Synthetic(block, params);
  }
  return {};
}

absl::StatusOr<std::vector<double>> SyntheticRatesFromUnconditional(std::span<const double> unconditional,
                                                                    const std::string& what) {
  std::vector<double> conditional;
  double previous = 1.0;
  for (size_t i = 0; i < unconditional.size(); ++i) {
    const double u = unconditional[i];
    if (!(u >= 0.0 && u <= 1.0)) {
      return absl::InvalidArgumentError(absl::StrCat(what, "[", i, "] = ", u, " is outside [0, 1]"));
    }
    if (u > previous) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, "[", i, "] = ", u, " rises above position ", i - 1, "'s ", previous,
          ": an unconditional rate is the fraction of drafts accepted up to that position, which cannot rise"));
    }
    conditional.push_back(previous > 0.0 ? u / previous : 0.0);
    previous = u;
  }
  return conditional;
}

absl::StatusOr<std::vector<double>> SyntheticRatesForAcceptanceLength(double acceptance_length, int64_t k,
                                                                      const std::string& what) {
  if (k < 1) return absl::InvalidArgumentError(absl::StrCat(what, " needs k >= 1 drafts, got k = ", k));
  if (!(acceptance_length >= 1.0 && acceptance_length <= static_cast<double>(k + 1))) {
    return absl::InvalidArgumentError(absl::StrCat(what, " = ", acceptance_length, " is outside [1, k + 1 = ", k + 1,
                                                   "]: the mean accepted length counts the bonus token"));
  }
  std::vector<double> rates(k, 0.0);
  const double drafts = acceptance_length - 1.0;
  const int64_t full = static_cast<int64_t>(std::floor(drafts));
  for (int64_t i = 0; i < full && i < k; ++i) rates[i] = 1.0;
  if (full < k) rates[full] = drafts - static_cast<double>(full);
  return rates;
}

}  // namespace mtpspec
