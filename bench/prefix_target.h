// A Target that runs a long prompt once and replays it: the benchmarks measure many requests that
// share one prompt (per held-out window, or per context length N), and the prefill is deterministic,
// so re-running it per request would only burn time.
//
// Fill(prefix) runs the prefix through the model in chunks and keeps its last-row logits and all
// rows' hidden states. After Reset(), a Run() whose tokens equal the prefix truncates the cache back
// to the prefix and returns copies of the stored step, exactly what a fresh prefill would return.
// Any other Run() is a normal forward (and forgets the stored prefix if it would overwrite it).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "model/model.h"
#include "spec/interfaces.h"
#include "pipeline/mtp_drafter.h"
#include "pipeline/model_target.h"

namespace mtpspec::bench {

// Attention options for long prompts: auto path, but gather for any number of rows once T > K, so
// chunked prefill and multi-row MTP extends cost O(rows·K) attention instead of the mask path's
// O(rows·T) (the paths agree to rounding; tests/attention checks dense = mask = gather).
AttentionOptions LongContextAttention();

// Fills positions [0, n) of every layer of `cache` with seeded random values of unit scale (latents,
// rope keys, indexer keys) and marks them valid, without running the model: at real dimensions a
// prefill of 128K tokens would take hours, and a decode step's cost does not depend on the values
// (the same bytes and multiply-adds; only which keys the indexer picks).
void FillCacheRandom(KvCache& cache, int64_t n, uint64_t seed);

// Batchable (pipeline/model_target.h): ModelBatchVerifier runs its verify blocks with other targets'.
class PrefixCachedTarget : public Target, public BatchableTarget {
 public:
  static absl::StatusOr<std::unique_ptr<PrefixCachedTarget>> Create(const Model& model, int64_t capacity,
                                                                    AttentionOptions attention);

  // Clears the cache and runs `prefix` in chunks of `chunk` rows. Seconds it took in *seconds.
  absl::Status Fill(std::span<const int32_t> prefix, int64_t chunk, double* seconds = nullptr);
  // As Fill, but with random cache rows and hidden states (FillCacheRandom) and zero last-row
  // logits instead of a forward: for costs at real dimensions, not for acceptance.
  absl::Status FillRandom(std::span<const int32_t> prefix, uint64_t seed);

  const Model& model() const { return model_; }
  KvCache& cache() { return *cache_; }
  int64_t prefix_length() const { return static_cast<int64_t>(prefix_.size()); }
  const Tensor& prefix_hidden_postnorm() const { return hidden_post_; }  // [N, H]
  const Tensor& prefix_hidden_prenorm() const { return hidden_pre_; }    // [N, H]
  const std::vector<int32_t>& prefix() const { return prefix_; }
  // Number of Run() calls answered from the stored prefix.
  int64_t replays() const { return replays_; }

  int64_t vocab_size() const override { return model_.config().vocab_size; }
  int64_t capacity() const override { return cache_->capacity(); }
  int64_t length() const override { return fresh_ ? 0 : cache_->length(); }
  std::vector<int64_t> eos_tokens() const override { return model_.config().eos_token_ids; }
  absl::StatusOr<TargetStep> Run(std::span<const int32_t> tokens, bool all_logits) override;
  absl::Status Truncate(int64_t length) override;
  void Reset() override {
    fresh_ = true;
    tree_first_ = -1;
  }
  // Tree verifies as ModelTarget runs them (pipeline/model_target.h).
  absl::StatusOr<TargetStep> RunTree(std::span<const int32_t> tokens, std::span<const int32_t> parents) override;
  absl::Status KeepTreePath(std::span<const int64_t> path) override;

  const Model& batch_model() const override { return model_; }
  KvCache& batch_cache() override { return *cache_; }
  const AttentionOptions& batch_attention() const override { return attention_; }
  // What Run does before its forward: a fresh target starts from an empty cache, and a forward that
  // overwrites prefix slots forgets the stored prefix.
  void BeforeBatchedRun() override;
  bool can_join_tree_batch() const override { return true; }
  void AfterBatchedTree(int64_t first, std::span<const int32_t> parents) override {
    tree_first_ = first;
    tree_parents_.assign(parents.begin(), parents.end());
  }

 private:
  PrefixCachedTarget(const Model& model, std::unique_ptr<KvCache> cache, AttentionOptions attention)
      : model_(model), cache_(std::move(cache)), attention_(attention) {}
  void Forget();

  const Model& model_;
  std::unique_ptr<KvCache> cache_;
  AttentionOptions attention_;
  bool fresh_ = true;  // Reset() was called and nothing ran since: length() reads 0
  std::vector<int32_t> prefix_;
  Tensor last_logits_;  // [1, V]
  Tensor hidden_post_;  // [N, H]
  Tensor hidden_pre_;   // [N, H]
  int64_t replays_ = 0;
  int64_t tree_first_ = -1;            // the committed length before the last RunTree (−1: none since)
  std::vector<int32_t> tree_parents_;  // [rows] of the last RunTree
};

// Makes `drafter` take a prompt as already extended (MtpDrafter::set_prompt_fill): the prompt's
// Observe fills the module cache's pairs [0, n − 1) with random rows (FillCacheRandom, `seed`) and
// runs only the newest pair through the MTP layer. The partner of PrefixCachedTarget::FillRandom:
// at real dimensions the MTP layer's extend over a 4K prompt takes minutes per request, and the
// cycles after it cost what they cost after a real extend. For costs only: the drafts do not follow
// the prompt. The drafter stays an MtpDrafter, so a batch's drafters still draft together.
void FillPromptRandomly(MtpDrafter& drafter, uint64_t seed);

}  // namespace mtpspec::bench
