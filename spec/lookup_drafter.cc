#include "spec/lookup_drafter.h"

#include <algorithm>

namespace mtpspec {

absl::StatusOr<Draft> LookupDrafter::Propose(std::span<const int32_t> seq, int64_t k, const DraftSampling&) {
  Draft draft;
  k = std::min(k, options_.max_k);
  const int64_t size = static_cast<int64_t>(seq.size());
  if (k <= 0) return draft;
  for (int64_t n = std::min(options_.max_ngram, size - 1); n >= options_.min_ngram; --n) {
    const int32_t* suffix = seq.data() + size - n;
    // Most recent match first; the match must end before the suffix itself starts.
    for (int64_t start = size - n - 1; start >= 0; --start) {
      if (!std::equal(suffix, suffix + n, seq.data() + start)) continue;
      for (int64_t i = start + n; i < size && static_cast<int64_t>(draft.tokens.size()) < k; ++i) {
        draft.tokens.push_back(seq[i]);
      }
      return draft;
    }
  }
  return draft;
}

absl::Status HybridDrafter::Observe(std::span<const int32_t> sequence, int64_t first, int64_t rows,
                                    const TargetStep& step) {
  RETURN_IF_ERROR(lookup_->Observe(sequence, first, rows, step));
  return mtp_->Observe(sequence, first, rows, step);
}

absl::StatusOr<Draft> HybridDrafter::Propose(std::span<const int32_t> sequence, int64_t k,
                                             const DraftSampling& sampling) {
  ASSIGN_OR_RETURN(Draft looked_up, lookup_->Propose(sequence, k, sampling));
  // Lookup drafts are deterministic; with sampled drafts (rejection sampling) use MTP throughout.
  if (!looked_up.tokens.empty() && !sampling.sample) return looked_up;
  return mtp_->Propose(sequence, k, sampling);
}

}  // namespace mtpspec
