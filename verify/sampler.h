// The sampler shared by plain decoding and every acceptance rule.
//
// A draw is a pure function of (logits, params, seed, position, stream): the uniform comes from the
// counter-based Philox RNG keyed by (seed, absolute position of the token being drawn, stream), so
// a verify pass and a plain decode step that see the same logits draw the same token.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace mtpspec {

struct SamplingParams {
  double temperature = 0.0;  // 0 = greedy (argmax, lowest index on ties)
  int64_t top_k = 0;         // 0 = off
  double top_p = 1.0;        // in (0, 1]
  double min_p = 0.0;        // in [0, 1]
  uint64_t seed = 0;

  bool greedy() const { return temperature == 0.0; }
};

// Checks ranges; errors name the argument.
absl::Status ValidateSamplingParams(const SamplingParams& params);

// RNG streams, so the draws of different purposes at one position are independent.
enum class RngStream : uint32_t {
  kTarget = 0,      // the target sampler's draw (plain decoding, sampler-equality, bonus tokens)
  kDraft = 1,       // sampling a draft token from the draft distribution
  kAccept = 2,      // rejection sampling's accept test
  kResidual = 3,    // rejection sampling's resample from max(0, p − q)
};

// The distribution the sampler draws from: softmax(logits / T) restricted by top-k, top-p and
// min-p, renormalised. Greedy gives a one-hot vector. probs: [V].
void SamplingDistribution(const float* logits, int64_t vocab, const SamplingParams& params,
                          std::vector<double>* probs);

// Inverse-CDF draw from `probs` (index order) with uniform u ∈ [0, 1).
int32_t DrawFrom(const std::vector<double>& probs, double u);

// Sampling without replacement (sampled tree drafts, verify/tree_acceptance.h): q ← q without
// token d, renormalised (summed in id order), the distribution the next draw comes from. False,
// with q all zero, when no mass is left.
bool RemoveAndRenormalize(std::vector<double>* q, int32_t d);

// Draws from q without replacement, the c-th with uniforms[c], each from q with the earlier draws
// removed by RemoveAndRenormalize; fewer than uniforms.size() when q's mass runs out.
std::vector<int32_t> DrawWithoutReplacement(std::vector<double> q, const std::vector<double>& uniforms);

// argmax with the lowest index winning ties.
int32_t Argmax(const float* logits, int64_t vocab);

// The target sampler: greedy → argmax; otherwise a draw keyed by (seed, position, kTarget).
int32_t SampleToken(const float* logits, int64_t vocab, const SamplingParams& params, int64_t position);

}  // namespace mtpspec
