// Prompt-lookup (n-gram) drafting and the hybrid that prefers it over MTP when it matches.
#pragma once

#include <memory>

#include "core/limits.h"
#include "spec/interfaces.h"

namespace mtpspec {

struct LookupOptions {
  int64_t max_ngram = 3;  // longest suffix n-gram to match
  int64_t min_ngram = 1;  // shortest
  int64_t max_k = kMaxDraftTokens;  // cap on proposed tokens
};

// Finds the most recent earlier occurrence of the sequence's last n tokens (longest n first) and
// proposes the tokens that followed it.
class LookupDrafter : public Drafter {
 public:
  explicit LookupDrafter(LookupOptions options) : options_(options) {}
  std::string name() const override { return "lookup"; }
  absl::Status Observe(std::span<const int32_t>, int64_t, int64_t, const TargetStep&) override {
    return absl::OkStatus();
  }
  absl::StatusOr<Draft> Propose(std::span<const int32_t> sequence, int64_t k, const DraftSampling&) override;
  void Reset() override {}

 private:
  LookupOptions options_;
};

// Lookup when it proposes anything, MTP otherwise. The MTP drafter observes every step so its
// cache stays current either way.
class HybridDrafter : public Drafter {
 public:
  HybridDrafter(std::unique_ptr<Drafter> lookup, std::unique_ptr<Drafter> mtp)
      : lookup_(std::move(lookup)), mtp_(std::move(mtp)) {}
  std::string name() const override { return "hybrid"; }
  absl::Status Observe(std::span<const int32_t> sequence, int64_t first, int64_t rows, const TargetStep& step) override;
  absl::StatusOr<Draft> Propose(std::span<const int32_t> sequence, int64_t k, const DraftSampling& sampling) override;
  void Reset() override {
    lookup_->Reset();
    mtp_->Reset();
  }

 private:
  std::unique_ptr<Drafter> lookup_;
  std::unique_ptr<Drafter> mtp_;
};

}  // namespace mtpspec
