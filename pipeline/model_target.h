// Target adapter: a Model plus its KvCache behind the spec::Target interface.
#pragma once

#include <memory>

#include "model/model.h"
#include "model/prefill_passes.h"
#include "spec/interfaces.h"

namespace mtpspec {

// Runs `tokens` at positions cache.length() … in prefill passes (ForwardInPasses) and packs the
// result as a TargetStep (logits for every row, or only the last one; hidden states for every row).
// Shared by ModelTarget and benchmark targets.
absl::StatusOr<TargetStep> RunOnCache(const Model& model, KvCache& cache, std::span<const int32_t> tokens,
                                      const AttentionOptions& attention, bool all_logits,
                                      int64_t pass_rows = kPrefillPassRows);
// Target::RunTree on `cache`: the tree's rows after the cache's committed positions, each at
// position length() + its depth under the tree mask, logits and hidden states for every row.
absl::StatusOr<TargetStep> RunTreeOnCache(const Model& model, KvCache& cache, std::span<const int32_t> tokens,
                                          std::span<const int32_t> parents, const AttentionOptions& attention);
// Target::KeepTreePath on `cache`, after a RunTreeOnCache that started at committed length `first`
// with these `parents`: checks that `path` runs from the root through children and keeps its slots.
absl::Status KeepTreePathOnCache(KvCache& cache, int64_t first, std::span<const int32_t> parents,
                                 std::span<const int64_t> path);

// What ModelBatchVerifier needs of a target to run its verify blocks in a batched forward: the model
// it runs, the host cache it owns (the forward appends the block there, as Run would) and its
// attention options. BeforeBatchedRun() comes just before such a forward, so that the target drops
// what its own Run would drop. A target that verifies token trees in a batch takes
// AfterBatchedTree(first, parents) after the forward that ran its tree from committed length
// `first`, so that its KeepTreePath works as after its own RunTree.
class BatchableTarget {
 public:
  virtual ~BatchableTarget() = default;
  virtual const Model& batch_model() const = 0;
  virtual KvCache& batch_cache() = 0;
  virtual const AttentionOptions& batch_attention() const = 0;
  virtual bool can_join_batch() const { return true; }
  virtual bool can_join_tree_batch() const { return false; }
  virtual void BeforeBatchedRun() {}
  virtual void AfterBatchedTree(int64_t first, std::span<const int32_t> parents) {}
};

class ModelTarget : public Target, public BatchableTarget {
 public:
  static absl::StatusOr<std::unique_ptr<ModelTarget>> Create(const Model& model, int64_t capacity,
                                                             AttentionOptions attention = {},
                                                             LatentStorage storage = LatentStorage::kF32);
  int64_t vocab_size() const override { return model_.config().vocab_size; }
  int64_t capacity() const override { return cache_->capacity(); }
  int64_t length() const override { return cache_->length(); }
  std::vector<int64_t> eos_tokens() const override { return model_.config().eos_token_ids; }
  absl::StatusOr<TargetStep> Run(std::span<const int32_t> tokens, bool all_logits) override;
  absl::Status Truncate(int64_t length) override {
    tree_first_ = -1;
    return cache_->Truncate(length);
  }
  void Reset() override {
    tree_first_ = -1;
    cache_->Clear();
  }

  // Emulates a device target on the host (for tests and A/B work): the loop then samples through
  // RunKeepingLogits and SampleLastRun, which keep the last logits here and draw with SampleToken.
  void set_samples_in_target(bool on) { samples_in_target_ = on; }
  bool samples_on_device() const override { return samples_in_target_; }
  absl::StatusOr<TargetStep> RunKeepingLogits(std::span<const int32_t> tokens, bool all_logits) override;
  absl::StatusOr<std::vector<int32_t>> SampleLastRun(const SamplingParams& params, int64_t first_position) override;
  absl::StatusOr<TargetStep> RunTree(std::span<const int32_t> tokens, std::span<const int32_t> parents) override;
  absl::Status KeepTreePath(std::span<const int64_t> path) override;

  const Model& batch_model() const override { return model_; }
  KvCache& batch_cache() override { return *cache_; }
  const AttentionOptions& batch_attention() const override { return attention_; }
  bool can_join_batch() const override { return !samples_in_target_; }  // a device target's sampling stays alone
  bool can_join_tree_batch() const override { return can_join_batch(); }
  void BeforeBatchedRun() override {
    kept_logits_ = Tensor();
    tree_first_ = -1;
  }
  void AfterBatchedTree(int64_t first, std::span<const int32_t> parents) override {
    tree_first_ = first;
    tree_parents_.assign(parents.begin(), parents.end());
  }

 private:
  ModelTarget(const Model& model, std::unique_ptr<KvCache> cache, AttentionOptions attention)
      : model_(model), cache_(std::move(cache)), attention_(attention) {}
  const Model& model_;
  std::unique_ptr<KvCache> cache_;
  AttentionOptions attention_;
  bool samples_in_target_ = false;
  Tensor kept_logits_;  // [R, V] of the last RunKeepingLogits
  int64_t tree_first_ = -1;      // the committed length before the last RunTree (−1: none since)
  std::vector<int32_t> tree_parents_;  // [rows] of the last RunTree
};

// Verifies the blocks of several ModelTargets over one Model in one forward (Model::ForwardBatch):
// every weight is read once for the batch, each routed expert once for all the rows that chose it,
// and each target's rows attend to its own cache only. Any BatchableTarget over the same model can
// join (ModelTarget, and the benchmarks' prefix-replaying target), unless it says it cannot;
// targets whose attention options differ from the first one's are refused.
class ModelBatchVerifier : public BatchVerifier {
 public:
  explicit ModelBatchVerifier(const Model& model) : model_(model) {}
  bool CanBatch(const Target& target) const override;
  absl::StatusOr<BatchVerification> VerifyBatch(std::span<Target* const> targets,
                                                std::span<const std::vector<int32_t>> blocks) override {
    return VerifyBatchWithTrees(targets, blocks, {});
  }
  // Tree blocks run under their own tree masks in the same forward (Model::ForwardBatch).
  bool CanBatchTree(const Target& target) const override;
  absl::StatusOr<BatchVerification> VerifyBatchWithTrees(std::span<Target* const> targets,
                                                         std::span<const std::vector<int32_t>> blocks,
                                                         std::span<const std::vector<int32_t>> tree_parents) override;

 private:
  const Model& model_;
};

}  // namespace mtpspec
