// Pearson's chi-square goodness-of-fit test, written out here so the statistical tests depend on
// nothing but the C++ standard library.
//
// The survival function of χ²(df) at x is the regularized upper incomplete gamma function
// Q(df/2, x/2), evaluated with the series for P(a, x) when x < a + 1 and with the Lentz continued
// fraction for Q(a, x) otherwise (the classic split; both converge fast on their side).
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace mtpspec::spec_testing {

// Q(a, x) = Γ(a, x) / Γ(a), a > 0, x ≥ 0.
inline double RegularizedUpperGamma(double a, double x) {
  if (x <= 0) return 1.0;
  const double log_prefactor = a * std::log(x) - x - std::lgamma(a);
  if (x < a + 1) {
    // P(a, x) = e^{-x} x^a / Γ(a + 1) · Σ_n x^n / ((a + 1)…(a + n))
    double term = 1.0 / a, sum = term;
    for (int n = 1; n < 10000; ++n) {
      term *= x / (a + n);
      sum += term;
      if (std::abs(term) < std::abs(sum) * 1e-15) break;
    }
    return 1.0 - sum * std::exp(log_prefactor);
  }
  // Q(a, x) = e^{-x} x^a / Γ(a) · 1 / (x + 1 − a − 1·(1 − a) / (x + 3 − a − 2·(2 − a) / (x + 5 − a − …)))
  const double tiny = 1e-300;
  double b = x + 1 - a, c = 1 / tiny, d = 1 / b, h = d;
  for (int i = 1; i < 10000; ++i) {
    const double an = -i * (i - a);
    b += 2;
    d = an * d + b;
    if (std::abs(d) < tiny) d = tiny;
    c = b + an / c;
    if (std::abs(c) < tiny) c = tiny;
    d = 1 / d;
    const double delta = d * c;
    h *= delta;
    if (std::abs(delta - 1) < 1e-15) break;
  }
  return std::exp(log_prefactor) * h;
}

inline double ChiSquareSurvival(double statistic, double df) { return RegularizedUpperGamma(df / 2, statistic / 2); }

struct ChiSquareResult {
  double statistic = 0;
  int64_t df = 0;
  double p_value = 1;
  int64_t impossible_hits = 0;  // observations in cells of expected probability 0
  std::string detail;           // observed vs expected per cell, for failure messages
};

// Observed counts against expected probabilities; cells with probability 0 are left out of the
// degrees of freedom and must be empty (they are counted in impossible_hits).
inline ChiSquareResult ChiSquareTest(const std::vector<int64_t>& observed, const std::vector<double>& probs) {
  ChiSquareResult r;
  int64_t total = 0;
  for (int64_t o : observed) total += o;
  int64_t cells = 0;
  for (size_t i = 0; i < observed.size(); ++i) {
    const double expected = probs[i] * static_cast<double>(total);
    absl::StrAppend(&r.detail, " [", i, "] ", observed[i], " vs ", expected, "\n");
    if (probs[i] <= 0) {
      r.impossible_hits += observed[i];
      continue;
    }
    ++cells;
    const double diff = static_cast<double>(observed[i]) - expected;
    r.statistic += diff * diff / expected;
  }
  r.df = cells - 1;
  r.p_value = ChiSquareSurvival(r.statistic, static_cast<double>(r.df));
  return r;
}

}  // namespace mtpspec::spec_testing
