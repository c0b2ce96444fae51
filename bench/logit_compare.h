// How far one logit row moves from a reference row, in the terms a user of a lossy cache asks
// about: the distribution's KL divergence, the largest logit error, whether greedy decoding picks
// the same token, and the held-out loss of the true next token under each. Computed in float64.
#pragma once

#include <cstdint>
#include <vector>

namespace mtpspec::bench {

struct RowComparison {
  double kl = 0;             // KL(p_ref ‖ p_test) in nats, p = softmax(logits)
  double max_abs_error = 0;  // max_v |test_v − ref_v|
  double logit_range = 0;    // max_v ref_v − min_v ref_v (the scale of the error above)
  bool same_argmax = true;   // first maximum of each row (ties to the lower id, as Argmax does)
  double nll_ref = 0;        // −log p_ref(next_token)
  double nll_test = 0;       // −log p_test(next_token)
};

// ref, test: [vocab]; next_token in [0, vocab).
RowComparison CompareLogitRows(const float* ref, const float* test, int64_t vocab, int32_t next_token);

// Means, maxima and rates over many rows.
struct ComparisonSummary {
  int64_t rows = 0;
  double mean_kl = 0, p99_kl = 0, max_kl = 0;
  double max_abs_error = 0;
  double max_relative_error = 0;  // max over rows of max_abs_error / logit_range
  double argmax_agreement = 0;    // fraction of rows with the same argmax
  double mean_nll_ref = 0, mean_nll_test = 0;
};
ComparisonSummary Summarize(const std::vector<RowComparison>& rows);

// Positions where two token sequences first differ (their common length when none) and the
// fraction of equal positions over that common length.
struct SequenceAgreement {
  int64_t length = 0;
  int64_t first_difference = 0;
  double equal_fraction = 1.0;
};
SequenceAgreement CompareSequences(const std::vector<int32_t>& a, const std::vector<int32_t>& b);

}  // namespace mtpspec::bench
