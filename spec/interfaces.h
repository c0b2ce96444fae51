// The two seams of the speculative loop. spec/ sees models only through these, so the loop, the
// acceptance rules and the statistics can be tested with a fake, weight-free model.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/draft_tree.h"
#include "core/tensor.h"
#include "verify/sampler.h"

namespace mtpspec {

// One target forward.
struct TargetStep {
  Tensor logits;           // [R, V] for the requested rows
  Tensor hidden_postnorm;  // [L, H] (may be empty for targets that have no hidden state)
  Tensor hidden_prenorm;   // [L, H]
};

class Target {
 public:
  virtual ~Target() = default;
  virtual int64_t vocab_size() const = 0;
  virtual int64_t capacity() const = 0;  // positions the cache can hold
  virtual int64_t length() const = 0;    // committed positions
  virtual std::vector<int64_t> eos_tokens() const = 0;
  // Runs `tokens` at positions length() … and appends them to the cache. Logits for every row when
  // `all_logits`, else only for the last row.
  virtual absl::StatusOr<TargetStep> Run(std::span<const int32_t> tokens, bool all_logits) = 0;
  // Keeps the first `length` positions (speculative rollback).
  virtual absl::Status Truncate(int64_t length) = 0;
  virtual void Reset() = 0;
  // Optional device sampling, for targets whose logits live on an accelerator. When
  // samples_on_device() holds, the loop runs sampler-equality with argmax drafts through
  // RunKeepingLogits and SampleLastRun, so only token ids cross to the host; the rules that read
  // the distributions (rejection, relaxed, synthetic, custom, sampled drafts) use Run as always.
  virtual bool samples_on_device() const { return false; }
  // Run, except that the logits may stay where they were computed (the returned logits may be
  // empty). Hidden states are returned as Run returns them.
  virtual absl::StatusOr<TargetStep> RunKeepingLogits(std::span<const int32_t> tokens, bool all_logits) {
    return Run(tokens, all_logits);
  }
  // The target sampler's draw (SampleToken in verify/sampler.h) for each logits row of the last
  // Run or RunKeepingLogits, row r drawn at absolute position first_position + r. It must equal
  // SampleToken on the logits Run would have returned. Targets without it answer Unimplemented.
  virtual absl::StatusOr<std::vector<int32_t>> SampleLastRun(const SamplingParams& params, int64_t first_position) {
    return absl::UnimplementedError("this target samples on the host");
  }
  // Optional tree verify. Runs `tokens` as a token tree after the committed positions n = length():
  // row 0 (the pending token) is the root at position n; row r > 0 is a child of row parents[r] < r
  // at position n + its depth, and sees the committed positions plus its own ancestors. Returns
  // logits and hidden states for every row, each equal to what the chain of its path would give.
  virtual absl::StatusOr<TargetStep> RunTree(std::span<const int32_t> tokens, std::span<const int32_t> parents) {
    return absl::UnimplementedError("this target cannot verify a token tree");
  }
  // After RunTree: keeps the rows `path` (path[0] = 0, each the parent of the next) as positions
  // n, n + 1, … and drops the rest of the tree.
  virtual absl::Status KeepTreePath(std::span<const int64_t> path) {
    return absl::UnimplementedError("this target cannot verify a token tree");
  }
};

// The verify forwards of a batch of requests (spec/batch.h): several targets' blocks in one forward.
struct BatchVerification {
  std::vector<TargetStep> steps;  // [targets] each what targets[i]->Run(blocks[i], true) returns
  int64_t rows = 0;               // verify rows in the forward
  // Routed experts the forward read, summed over its MoE layers (the union of the rows' choices in
  // each layer), and the rows' routing choices summed the same way. 0 where the targets have none.
  int64_t experts_read = 0;
  int64_t expert_choices = 0;
};

class BatchVerifier {
 public:
  virtual ~BatchVerifier() = default;
  // Whether `target` can take part in this verifier's forwards.
  virtual bool CanBatch(const Target& target) const = 0;
  // For every i, the result of targets[i]->Run(blocks[i], /*all_logits=*/true), bit for bit, from
  // one forward over all the blocks; each target's cache advances as that Run would advance it. On
  // error every target is as it was.
  virtual absl::StatusOr<BatchVerification> VerifyBatch(std::span<Target* const> targets,
                                                        std::span<const std::vector<int32_t>> blocks) = 0;
  // Whether `target` can take part in these forwards with a token tree.
  virtual bool CanBatchTree(const Target& target) const { return false; }
  // As VerifyBatch, where a block may be a token tree: with tree_parents[i] non-empty, steps[i] is
  // what targets[i]->RunTree(blocks[i], tree_parents[i]) returns, and the target is left as that
  // RunTree leaves it (KeepTreePath comes next). An empty span, or an empty tree_parents[i], is a
  // chain. The default takes chains only.
  virtual absl::StatusOr<BatchVerification> VerifyBatchWithTrees(std::span<Target* const> targets,
                                                                 std::span<const std::vector<int32_t>> blocks,
                                                                 std::span<const std::vector<int32_t>> tree_parents) {
    for (const std::vector<int32_t>& parents : tree_parents) {
      if (!parents.empty()) return absl::UnimplementedError("this batch verifier takes chains only");
    }
    return VerifyBatch(targets, blocks);
  }
};

// How drafts are chosen from the draft distribution.
struct DraftSampling {
  bool sample = false;  // false: argmax drafts (what vLLM, SGLang and mlx do); true: q-sampled drafts
  SamplingParams sampling;  // temperature etc. of the draft distribution when sampling
};

struct Draft {
  std::vector<int32_t> tokens;               // [k']
  std::vector<std::vector<double>> probs;    // [k'][V] draft distributions q_j (sampled drafts only)
  // Seconds of this Propose spent catching up on committed rows the drafter had deferred (e.g. the
  // MTP extend after plain steps): a cost of having decoded plainly, not of the draft steps.
  double catch_up_seconds = 0;
};

// A draft token tree (core/draft_tree.h) in breadth-first order.
struct TreeDraft {
  std::vector<int32_t> tokens;   // [nodes]
  std::vector<int32_t> parents;  // [nodes] the parent's verify row: 0 = the pending token, i + 1 = node i
  std::vector<int64_t> ranks;    // [nodes] rank among the parent's candidates (0 = the drafter's best)
  // [1 + nodes] or empty: per verify row (0 = the pending token), the draft distribution q ([V]) its
  // children were sampled from without replacement (empty where they are not sampled).
  std::vector<std::vector<double>> probs;
  double catch_up_seconds = 0;   // as in Draft
};

class Drafter {
 public:
  virtual ~Drafter() = default;
  virtual std::string name() const = 0;
  // The target just committed positions first_position … first_position + rows − 1 of `sequence`
  // (whose last token is the newest sample, not yet run by the target). `step` holds those rows'
  // hidden states (rows 0 … rows − 1). The first call after Reset carries the prompt; work done
  // there belongs to the prefill. A drafter may process the rows at once or defer them until it is
  // next asked to Propose.
  virtual absl::Status Observe(std::span<const int32_t> sequence, int64_t first_position, int64_t rows,
                               const TargetStep& step) = 0;
  // Up to k tokens continuing `sequence`. May return fewer (or none).
  virtual absl::StatusOr<Draft> Propose(std::span<const int32_t> sequence, int64_t k,
                                        const DraftSampling& sampling) = 0;
  virtual void Reset() = 0;
  // A hint, given after Reset and before the prompt's Observe: the loop does not expect to propose
  // in this request, so the drafter may leave the prompt's rows for its next Propose (and report
  // that work there as catch_up_seconds) instead of processing them at the prefill.
  virtual void DeferPrompt() {}
  // Tree drafting (optional): a tree of the given shape continuing `sequence`, which may be smaller
  // than the shape (or empty) where the drafter runs out of room. Its children are the drafter's
  // best tokens, or, with sampling.sample, drawn from q without replacement (static shapes).
  virtual bool can_branch() const { return false; }
  virtual absl::StatusOr<TreeDraft> ProposeTree(std::span<const int32_t> sequence, const TreeShape& shape,
                                                const DraftSampling& sampling) {
    return absl::UnimplementedError("this drafter cannot draft a tree");
  }
};

// Drafts for several requests at once (spec/batch.h), optional: the drafters' forwards run as one
// where the implementation can batch them.
class BatchDrafter {
 public:
  virtual ~BatchDrafter() = default;
  virtual bool CanBatch(const Drafter& drafter) const = 0;
  // A drafter it can batch takes a batch's slot (true) or leaves it (false): while in, the drafter
  // may leave work for ProposeBatch to run with the others' (MtpBatchDrafter: the MTP extends of
  // committed rows), without changing any draft.
  virtual void SetBatched(Drafter& drafter, bool batched) {}
  // For every i, what drafters[i]->Propose(sequences[i], ks[i], samplings[i]) returns, bit for bit.
  virtual std::vector<absl::StatusOr<Draft>> ProposeBatch(std::span<Drafter* const> drafters,
                                                          std::span<const std::span<const int32_t>> sequences,
                                                          std::span<const int64_t> ks,
                                                          std::span<const DraftSampling> samplings) = 0;
};

}  // namespace mtpspec
