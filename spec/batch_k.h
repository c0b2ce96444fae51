// Adaptive k for a batch of requests (GenerateBatch, spec/batch.h): each cycle, one draft length
// per request, chosen together from the batch's own cost model:
//
//   E(k_1 … k_B) = Σ_i (1 + Σ_{j ≤ k_i} Π_{l ≤ j} a_{i,l})          expected tokens of the cycle
//   C(k_1 … k_B) = Tv(R) + max_i k_i · D + x · #{i : k_i > 0},       R = Σ_i (k_i + 1)
//
// and the lengths that maximise E / C. a_{i,l} is request i's conditional acceptance at draft
// position l, from its own counts with the batch's pooled counts as the prior (so a new request
// starts from what the others showed). Tv(R) is the batched verify's time at R rows, a line
// α + β·R fitted to the forwards measured so far (each row count at the median of its last five): one more row costs β, however the rows are spread
// over the requests, which is what makes a request's extra draft cheap when the batch already
// reads the experts and weights it needs. D is one batched draft depth (the drafters draft
// together, so the deepest request sets the depth count) and x one request's share of the
// extends (a batch's MTP drafters extend together too).
//
// The choice: for each depth cap K = 0 … k_max, add drafts one at a time in order of their
// expected gain Π a (each request's next position), while E / C grows; keep the best cap. Until two
// row counts are measured the slope is priced at β = α / B per row (a verify of R rows costing R/B
// plain batch steps: drafting must prove itself), and every `gap` cycles a probe drafts one more
// position for every request than the choice, which measures new row counts; a probe that leaves
// the choice unchanged doubles the gap (up to kMaxGap), a change resets it.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <vector>

namespace mtpspec {

class BatchDraftController {
 public:
  static constexpr int64_t kFirstGap = 8;
  static constexpr int64_t kMaxGap = 256;
  static constexpr double kPriorAcceptance = 0.5;
  static constexpr double kPriorWeight = 4.0;  // pseudo-observations of the pooled rate per request

  explicit BatchDraftController(int64_t k_max) : k_max_(k_max) {}

  // Draft lengths for the cycle's requests (ids stable across cycles), each within [0, caps[i]];
  // `other_rows` are the verify rows the rest of the batch (requests with a fixed k) adds to the
  // same forward. *probe tells whether this cycle explores.
  std::vector<int64_t> Choose(std::span<const int64_t> requests, std::span<const int64_t> caps, int64_t other_rows,
                              bool* probe);
  // What the cycle did: its verify forward of `rows` rows, the drafting (deepest request `depth`),
  // and the requests' extends (`extending` requests that drafted).
  void RecordCycle(int64_t rows, double verify_seconds, int64_t depth, double draft_seconds,
                   int64_t extending, double extend_seconds);
  // Request `request` drafted `drafted` positions and `accepted` of them were accepted (a prefix).
  void RecordAcceptance(int64_t request, int64_t drafted, int64_t accepted);
  // The request left the batch.
  void Forget(int64_t request) { requests_.erase(request); }

  // The model's pieces, for tests and reports.
  double VerifySeconds(int64_t rows, int64_t batch) const;  // Tv(R) as priced now
  double Acceptance(int64_t request, int64_t position) const;  // a_{i, position}, position 1-based
  int64_t k_max() const { return k_max_; }

 private:
  struct Counts {
    std::vector<double> reached, accepted;  // [k_max] by position
  };
  double ExpectedTokens(int64_t request, int64_t k) const;
  double Cost(const std::vector<int64_t>& k, int64_t batch, int64_t other_rows) const;
  std::vector<int64_t> Best(std::span<const int64_t> requests, std::span<const int64_t> caps, int64_t other_rows) const;

  int64_t k_max_;
  std::map<int64_t, Counts> requests_;
  Counts pooled_;
  // Verify forwards: rows → the last kSamples times measured at that row count, newest last. A row
  // count is priced at their median, which follows the context as it grows and ignores a forward
  // the machine preempted (timing noise only ever adds time).
  static constexpr size_t kSamples = 5;
  std::map<int64_t, std::vector<double>> verify_;
  static double Median(std::vector<double> samples);
  double draft_seconds_ = 0, extend_seconds_ = 0;
  int64_t draft_depths_ = 0, extends_ = 0;
  int64_t cycles_ = 0, next_probe_ = kFirstGap, gap_ = kFirstGap;
  std::vector<int64_t> last_choice_;
};

}  // namespace mtpspec
