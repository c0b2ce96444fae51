// The MTP drafter: chains the MTP head k steps (model-spec §7.4).
//
// Its cache holds (target hidden, committed token) pairs only. Observe drops the previous draft's
// speculative slots and extends the cache over the newly committed pairs ("draft extend"), in
// chunks of at most MtpOptions::extend_chunk rows, keeping the newest pair's output: the next
// Propose starts its chain there (head → first draft, then k − 1 chained steps). The prompt is
// extended at its Observe (prefill time). While the loop decodes plainly (no Propose since the
// last Observe) the extend is deferred, and the next Propose catches up and reports that time.
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
  // The prompt's extend waits for the next Propose: running the MTP layer over every prompt row
  // evicts the trunk's weights from the cache, and a request that decodes plainly pays for that in
  // its first decode steps (about 2% of a 128-token request on models/glm-tiny-mtp).
  void DeferPrompt() override { extend_at_observe_ = false; }

  const KvCache& cache() const { return *cache_; }
  const MtpOptions& options() const { return options_; }
  int64_t committed_pairs() const { return committed_; }  // cache slots 0 … committed − 1
  int64_t deferred_pairs() const { return static_cast<int64_t>(pending_tokens_.size()); }

 private:
  MtpDrafter(std::unique_ptr<MtpModule> module, std::unique_ptr<KvCache> cache, const MtpOptions& options)
      : module_(std::move(module)), cache_(std::move(cache)), options_(options) {}
  // Runs the deferred pairs through the module in chunks and keeps the newest one's output.
  absl::Status ExtendPending();

  std::unique_ptr<MtpModule> module_;
  std::unique_ptr<KvCache> cache_;
  MtpOptions options_;
  int64_t committed_ = 0;        // committed pairs in the cache (positions 0 … committed − 1)
  bool extend_at_observe_ = true;  // the prompt, and while the loop keeps proposing
  // Committed pairs not yet in the cache, from position committed_ on.
  std::vector<float> pending_hidden_;   // [pending, H]
  std::vector<int32_t> pending_tokens_;  // [pending]
  // Output of the newest cached pair (position committed_ − 1): where the next chain starts.
  std::vector<float> last_normed_;  // [H] shared_head.norm(g): the head input of the first draft
  std::vector<float> last_raw_;     // [H] g
  std::vector<int32_t> last_topk_;  // [width] its indexer selection (empty: dense)
};

}  // namespace mtpspec
