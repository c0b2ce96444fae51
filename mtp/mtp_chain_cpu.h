// The host side of the MTP draft chain (mtp/mtp_chain.h): the module and its one-layer cache in
// host memory.
#pragma once

#include <memory>
#include <vector>

#include "mtp/mtp_chain.h"

namespace mtpspec {

class CpuMtpBackend : public MtpChainBackend {
 public:
  // `model` must outlive the backend. Fails when the model has no MTP layer.
  static absl::StatusOr<std::unique_ptr<CpuMtpBackend>> Create(const Model& model, int64_t capacity);

  int64_t capacity() const override { return cache_->capacity(); }
  const ModelConfig& config() const override { return module_->model().config(); }
  absl::Status QueueHidden(const float* hidden, int64_t rows) override;
  void ClearQueue() override { queued_hidden_.clear(); }
  absl::Status TruncateCache(int64_t length) override;
  void ClearCache() override;
  absl::Status Extend(int64_t begin, std::span<const int32_t> tokens, int64_t first_position,
                      const MtpOptions& options, bool keep_start) override;
  bool start_has_selection() const override { return !start_topk_.empty(); }
  absl::Status BeginChain() override;
  absl::StatusOr<MtpHeadRow*> Head() override;
  absl::Status Step(int32_t token, int64_t position, const MtpOptions& options, bool share_selection) override;
  absl::Status BeginTree() override;
  absl::StatusOr<Tensor> TreeHeads(std::span<const int64_t> states) override;
  absl::Status TreeStep(std::span<const int64_t> parent_states, std::span<const int32_t> tokens,
                        std::span<const int64_t> positions, const TreeMask& mask, const MtpOptions& options,
                        bool share_selection) override;

  const KvCache& cache() const { return *cache_; }
  KvCache& mutable_cache() { return *cache_; }
  const MtpModule& module() const { return *module_; }

 private:
  friend class CpuMtpBatch;
  class HostHead : public MtpHeadRow {
   public:
    const float* logits() const override { return values.data<float>(); }
    absl::StatusOr<std::span<const float>> HostLogits() override {
      return std::span<const float>(values.data<float>(), static_cast<size_t>(values.numel()));
    }
    Tensor values;  // [1, V]
  };

  // The last of `rows` extended rows becomes the start state.
  void KeepStart(const MtpStepOutput& out, int64_t rows);

  CpuMtpBackend(std::unique_ptr<MtpModule> module, std::unique_ptr<KvCache> cache)
      : module_(std::move(module)), cache_(std::move(cache)) {}

  std::unique_ptr<MtpModule> module_;
  std::unique_ptr<KvCache> cache_;
  std::vector<float> queued_hidden_;  // [queued, H]
  // The newest committed pair's outputs: where every chain starts.
  std::vector<float> start_normed_;   // [H] shared_head.norm(g)
  std::vector<float> start_raw_;      // [H] g
  std::vector<int32_t> start_topk_;   // [width] its indexer selection (empty: dense)
  // The last chained step's outputs (the start's right after BeginChain).
  std::vector<float> chained_normed_;  // [H]
  std::vector<float> chained_raw_;     // [H]
  TopK shared_;                        // [1, width] the start's selection, for shared steps
  // A tree's node states (state 0 = the start's), appended by each TreeStep.
  std::vector<float> tree_normed_;  // [states, H]
  std::vector<float> tree_raw_;     // [states, H]
  HostHead head_;
};

// The chained steps (and the due extends) of several host chains over one model's MTP layer in one
// forward (MtpModule::ExtendBatch) and their heads in one head product, inside a RowInvariantScope,
// so each chain gets the bits of its own Step, Extend and Head.
class CpuMtpBatch : public MtpBatchBackend {
 public:
  bool CanJoin(const MtpChainBackend& backend) const override;
  absl::StatusOr<std::vector<MtpHeadRow*>> Heads(std::span<MtpChainBackend* const> backends) override;
  absl::Status Steps(std::span<MtpChainBackend* const> backends, std::span<const int32_t> tokens,
                     std::span<const int64_t> positions, const MtpOptions& options) override;
  absl::Status Extends(std::span<MtpChainBackend* const> backends, std::span<const std::span<const int32_t>> tokens,
                       std::span<const int64_t> first_positions, const MtpOptions& options) override;

 private:
  // The host backends, checked to share one MTP layer (and, with `begun`, to have begun a chain).
  static absl::StatusOr<std::vector<CpuMtpBackend*>> Members(std::span<MtpChainBackend* const> backends,
                                                             bool begun = true);
};

}  // namespace mtpspec
