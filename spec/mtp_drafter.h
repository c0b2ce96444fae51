// The MTP drafter: chains the MTP head k steps (model-spec §7.4).
//
// Its cache always holds (target hidden, committed token) pairs: after each verify, the slots of
// the previous draft are dropped and the accepted positions are rebuilt from the target's hidden
// states in one causal chunk ("draft extend"), whose last row also yields the first new draft.
#pragma once

#include <memory>

#include "mtp/mtp_module.h"
#include "spec/interfaces.h"

namespace mtpspec {

class MtpDrafter : public Drafter {
 public:
  static absl::StatusOr<std::unique_ptr<MtpDrafter>> Create(const Model& model, int64_t capacity,
                                                            const MtpOptions& options);
  std::string name() const override { return "mtp"; }
  absl::Status Observe(std::span<const int32_t> sequence, int64_t first_position, int64_t rows,
                       const TargetStep& step) override;
  absl::StatusOr<Draft> Propose(std::span<const int32_t> sequence, int64_t k, const DraftSampling& sampling) override;
  void Reset() override;

  const KvCache& cache() const { return *cache_; }
  const MtpOptions& options() const { return options_; }

 private:
  MtpDrafter(std::unique_ptr<MtpModule> module, std::unique_ptr<KvCache> cache, const MtpOptions& options)
      : module_(std::move(module)), cache_(std::move(cache)), options_(options) {}

  std::unique_ptr<MtpModule> module_;
  std::unique_ptr<KvCache> cache_;
  MtpOptions options_;
  // Committed pairs not yet in the cache: hidden rows [n, H], the tokens that follow them, and the
  // position of the first one. Slots before `pending_position_` hold committed pairs.
  std::vector<float> pending_hidden_;
  std::vector<int32_t> pending_tokens_;
  int64_t pending_position_ = 0;
};

}  // namespace mtpspec
