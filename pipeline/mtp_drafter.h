// The MTP drafter: the Drafter side of the MTP draft chain (mtp/mtp_chain.h), on either device.
//
// The chain itself (its cache of committed pairs, the deferred extends, the chained steps) is the
// device-neutral MtpDraftChain; this class hands it the committed rows' hidden states and picks each
// draft token: argmax (vLLM, SGLang and mlx draft this way at any temperature), or a q-sample keyed
// by (seed, position, kDraft) whose distribution it keeps for the rejection rule. Create builds
// the host drafter; pipeline/cuda_mtp_drafter.h builds the GPU one over a CudaTarget.
#pragma once

#include <functional>
#include <memory>

#include "mtp/mtp_chain.h"
#include "spec/interfaces.h"

namespace mtpspec {

class KvCache;

class MtpDrafter : public Drafter {
 public:
  // Where the hidden rows of a committed step live for the chain's backend: rows [0, rows) of
  // `step` (host), or the device copy of the same forward.
  using HiddenSource = std::function<absl::StatusOr<const float*>(const TargetStep& step, int64_t first_position,
                                                                  int64_t rows)>;
  // The argmax of a head row where its logits live.
  using ArgmaxFn = std::function<absl::StatusOr<int32_t>(MtpHeadRow& head)>;

  // The host drafter over `model`'s MTP layer, with a cache of `capacity` positions.
  static absl::StatusOr<std::unique_ptr<MtpDrafter>> Create(const Model& model, int64_t capacity,
                                                            const MtpOptions& options);
  // A drafter over any backend (the GPU factory uses it).
  static absl::StatusOr<std::unique_ptr<MtpDrafter>> Create(std::unique_ptr<MtpChainBackend> backend,
                                                            const MtpOptions& options, HiddenSource hidden,
                                                            ArgmaxFn argmax);

  std::string name() const override { return "mtp"; }
  absl::Status Observe(std::span<const int32_t> sequence, int64_t first_position, int64_t rows,
                       const TargetStep& step) override;
  absl::StatusOr<Draft> Propose(std::span<const int32_t> sequence, int64_t k, const DraftSampling& sampling) override;
  void Reset() override { chain_->Reset(); }
  // The prompt's extend waits for the next Propose: running the MTP layer over every prompt row
  // evicts the trunk's weights from the CPU caches, and a request that decodes plainly pays for
  // that in its first decode steps (about 2% of a 128-token request on models/glm-tiny-mtp).
  void DeferPrompt() override { chain_->DeferPrompt(); }
  // Trees from the MTP head (MtpDraftChain::ProposeTree); the host backend only.
  bool can_branch() const override { return host_cache() != nullptr; }
  absl::StatusOr<TreeDraft> ProposeTree(std::span<const int32_t> sequence, const TreeShape& shape,
                                        const DraftSampling& sampling) override;

  // For cost benchmarks at real dimensions (the host backend only): when set, the Observe of a whole
  // prompt (first position 0, rows ≥ 2) calls fill(module cache, rows − 1) to write the older pairs
  // [0, rows − 1) instead of running the MTP layer over them (minutes per request at GLM-5.2's
  // dimensions and a 4K prompt), takes them as committed, and commits only the newest pair. The
  // cycles after it cost what they cost after a real extend; the drafts no longer follow the prompt.
  using PromptFill = std::function<void(KvCache& cache, int64_t pairs)>;
  void set_prompt_fill(PromptFill fill) { prompt_fill_ = std::move(fill); }

  const MtpDraftChain& chain() const { return *chain_; }
  MtpDraftChain& mutable_chain() { return *chain_; }
  // The chain's picker for `sampling`: argmax, or a q-sample keyed by (seed, position, kDraft) whose
  // q is appended to *probs.
  MtpDraftPicker Picker(const DraftSampling& sampling, std::vector<std::vector<double>>* probs) const;
  const MtpOptions& options() const { return chain_->options(); }
  int64_t committed_pairs() const { return chain_->committed_pairs(); }
  int64_t deferred_pairs() const { return chain_->deferred_pairs(); }
  // The module cache of a host drafter (null for another backend).
  const KvCache* host_cache() const;
  KvCache* mutable_host_cache();

 private:
  MtpDrafter(std::unique_ptr<MtpDraftChain> chain, HiddenSource hidden, ArgmaxFn argmax)
      : chain_(std::move(chain)), hidden_(std::move(hidden)), argmax_(std::move(argmax)) {}
  absl::Status ObserveFilledPrompt(std::span<const int32_t> sequence, int64_t rows, const TargetStep& step);

  std::unique_ptr<MtpDraftChain> chain_;
  HiddenSource hidden_;
  ArgmaxFn argmax_;
  PromptFill prompt_fill_;
  int64_t hidden_size_ = 0;  // H of the host backend's model (0: another backend)
};

// Proposes for several host MTP drafters at once: their due extends of committed rows run as one MTP
// forward, then each draft depth runs every drafter's head as one head product and their chained
// steps as one MTP forward (MtpDraftChain::ProposeBatch), so every request's drafts equal its own
// Propose's. Other drafters are not batched.
class MtpBatchDrafter : public BatchDrafter {
 public:
  MtpBatchDrafter();
  ~MtpBatchDrafter() override;
  bool CanBatch(const Drafter& drafter) const override;
  // The drafter's extends wait for the next ProposeBatch, which runs those of all its drafters in
  // one MTP forward (MtpDraftChain::set_batch_extends).
  void SetBatched(Drafter& drafter, bool batched) override;
  std::vector<absl::StatusOr<Draft>> ProposeBatch(std::span<Drafter* const> drafters,
                                                  std::span<const std::span<const int32_t>> sequences,
                                                  std::span<const int64_t> ks,
                                                  std::span<const DraftSampling> samplings) override;

 private:
  std::unique_ptr<MtpBatchBackend> batch_;
};

}  // namespace mtpspec
