#include "bench/logit_compare.h"

#include <algorithm>
#include <cmath>

namespace mtpspec::bench {
namespace {

// log Σ exp(z_v), shifted by the maximum.
double LogSumExp(const float* z, int64_t vocab, double max_z) {
  double sum = 0;
  for (int64_t v = 0; v < vocab; ++v) sum += std::exp(static_cast<double>(z[v]) - max_z);
  return max_z + std::log(sum);
}

int64_t FirstArgmax(const float* z, int64_t vocab) { return std::max_element(z, z + vocab) - z; }

}  // namespace

RowComparison CompareLogitRows(const float* ref, const float* test, int64_t vocab, int32_t next_token) {
  RowComparison out;
  const int64_t ref_top = FirstArgmax(ref, vocab), test_top = FirstArgmax(test, vocab);
  out.same_argmax = ref_top == test_top;
  const double ref_max = ref[ref_top], test_max = test[test_top];
  const double ref_lse = LogSumExp(ref, vocab, ref_max), test_lse = LogSumExp(test, vocab, test_max);
  double ref_min = ref_max;
  for (int64_t v = 0; v < vocab; ++v) {
    const double log_p = ref[v] - ref_lse;    // log p_ref(v)
    const double log_q = test[v] - test_lse;  // log p_test(v)
    out.kl += std::exp(log_p) * (log_p - log_q);
    out.max_abs_error = std::max(out.max_abs_error, std::fabs(static_cast<double>(test[v]) - ref[v]));
    ref_min = std::min<double>(ref_min, ref[v]);
  }
  out.kl = std::max(out.kl, 0.0);  // rounding can leave a tiny negative sum for equal rows
  out.logit_range = ref_max - ref_min;
  out.nll_ref = ref_lse - ref[next_token];
  out.nll_test = test_lse - test[next_token];
  return out;
}

ComparisonSummary Summarize(const std::vector<RowComparison>& rows) {
  ComparisonSummary s;
  s.rows = static_cast<int64_t>(rows.size());
  if (rows.empty()) return s;
  std::vector<double> kls;
  int64_t same = 0;
  for (const RowComparison& r : rows) {
    kls.push_back(r.kl);
    s.mean_kl += r.kl;
    s.max_abs_error = std::max(s.max_abs_error, r.max_abs_error);
    if (r.logit_range > 0) s.max_relative_error = std::max(s.max_relative_error, r.max_abs_error / r.logit_range);
    same += r.same_argmax;
    s.mean_nll_ref += r.nll_ref;
    s.mean_nll_test += r.nll_test;
  }
  const double n = static_cast<double>(rows.size());
  s.mean_kl /= n;
  s.mean_nll_ref /= n;
  s.mean_nll_test /= n;
  s.argmax_agreement = static_cast<double>(same) / n;
  std::sort(kls.begin(), kls.end());
  s.max_kl = kls.back();
  s.p99_kl = kls[std::min<size_t>(kls.size() - 1, static_cast<size_t>(std::ceil(0.99 * n)) - 1)];
  return s;
}

SequenceAgreement CompareSequences(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  SequenceAgreement s;
  s.length = static_cast<int64_t>(std::min(a.size(), b.size()));
  s.first_difference = s.length;
  int64_t equal = 0;
  for (int64_t i = 0; i < s.length; ++i) {
    if (a[i] == b[i]) {
      ++equal;
    } else if (s.first_difference == s.length) {
      s.first_difference = i;
    }
  }
  s.equal_fraction = s.length > 0 ? static_cast<double>(equal) / static_cast<double>(s.length) : 1.0;
  return s;
}

}  // namespace mtpspec::bench
