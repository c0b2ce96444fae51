// Acceptance rules for a verify block (docs/models.md, "Speculative verification").
//
// Row j of the target logits (j = 0..k) is the target's distribution for the token after the j-th
// verified input, i.e. for absolute position first_position + j. Drafts d_1..d_k are proposals for
// positions first_position .. first_position + k − 1.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "verify/sampler.h"

namespace mtpspec {

enum class AcceptRule {
  kSamplerEquality,  // lossless: accept while the draft equals the target sampler's own draw
  kRejection,        // lossless in distribution: Leviathan/Chen speculative sampling
  kRelaxed,          // LOSSY: accept drafts in the target's top-N within δ of the top-1 probability
  kSynthetic,        // BENCHMARK ONLY: accept position i with a set probability, whatever the draft
};

const char* AcceptRuleName(AcceptRule rule);
absl::StatusOr<AcceptRule> ParseAcceptRule(const std::string& name);
inline bool IsLossless(AcceptRule rule) {
  return rule == AcceptRule::kSamplerEquality || rule == AcceptRule::kRejection;
}

struct AcceptParams {
  AcceptRule rule = AcceptRule::kSamplerEquality;
  SamplingParams sampling;
  int64_t relaxed_top_n = 3;
  double relaxed_delta = 0.1;
  // [k_max] the CONDITIONAL acceptance probability of draft position i (0-based): accepted with
  // this probability given that positions 0 … i−1 were. SyntheticRatesFromUnconditional and
  // SyntheticRatesForAcceptanceLength turn the other published forms into this one.
  std::vector<double> synthetic_rates;
  // Synthetic acceptance over a token tree (verify/tree_acceptance.h): [depth][sibling rank] the
  // probability that a node's child of that rank is accepted, given that the node was reached at
  // that depth (0: the root) and its lower-ranked children were rejected. Rows and ranks past the
  // table take its last; an empty table takes synthetic_rates for rank 0 and 0 for the others.
  std::vector<std::vector<double>> synthetic_tree_rates;
};

struct VerifyBlock {
  const float* target_logits = nullptr;  // [k + 1, V]
  int64_t vocab = 0;
  std::span<const int32_t> drafts;       // [k]
  // Draft distributions q_j over the vocabulary ([k][V]) for rejection sampling with sampled
  // drafts; empty means deterministic drafts (q = one-hot at the draft).
  const std::vector<std::vector<double>>* draft_probs = nullptr;
  int64_t first_position = 0;
};

struct AcceptResult {
  int64_t accepted = 0;         // m: drafts accepted
  std::vector<int32_t> tokens;  // m accepted drafts, then one target token (correction or bonus)
};

AcceptResult AcceptDrafts(const VerifyBlock& block, const AcceptParams& params);

// Published per-position rates come in two forms. Conditional: c_i = P(position i accepted |
// positions 0 … i−1 accepted), what synthetic_rates holds. Unconditional: u_i = P(positions 0 … i all
// accepted) = c_0 · … · c_i, the fraction of drafts accepted at position i, whose sum plus one is the
// mean accepted length (llama.cpp's per-position statistics, vLLM's synthetic_acceptance_rates).
// Returns c from u; u must be in [0, 1] and must not rise (u_i ≤ u_{i−1}); errors name `what`.
absl::StatusOr<std::vector<double>> SyntheticRatesFromUnconditional(std::span<const double> unconditional,
                                                                    const std::string& what);
// vLLM's synthetic schedule for a mean accepted length AL (the bonus token included) at k drafts:
// unconditional rates [1, …, 1, f, 0, …] with floor(AL − 1) ones and f = AL − 1 − floor(AL − 1), so
// that 1 + Σ u_i = AL; returned in the conditional form (the same list). AL must be in [1, k + 1].
absl::StatusOr<std::vector<double>> SyntheticRatesForAcceptanceLength(double acceptance_length, int64_t k,
                                                                      const std::string& what);

// Sampler-equality from the target sampler's draws for the block's rows (samples[j] drawn from row
// j at position first_position + j, e.g. on a device): accepts while drafts[j] == samples[j], then
// emits samples[m]. Equals AcceptDrafts with kSamplerEquality on the same logits. Needs
// samples.size() == drafts.size() + 1.
absl::StatusOr<AcceptResult> AcceptBySamples(std::span<const int32_t> drafts, std::span<const int32_t> samples);

}  // namespace mtpspec
