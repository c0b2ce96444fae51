// One request driven through the loop's steps (spec/loop.h), a cycle at a time: what Generate runs
// alone and GenerateBatch (spec/batch.h) runs beside other requests. It owns the request's state,
// its statistics and its observers, so that a single request and a request in a batch are the same
// code up to who runs the verify forward.
//
//   Request::Start                 validation, reset, PrefillStep
//   while BeginCycle():
//     chain request: DraftLength → Draft → Verify (alone) or SetVerified (a batch's forward) → EndCycle
//     tree request:  DraftTree   → Verify (alone) or SetVerified (a batch's forward) → EndCycle
//                    (spec/tree_loop.h; RunTreeCycle runs the three alone)
//   Finish                         the GenerateResult
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "spec/generator.h"
#include "spec/loop.h"
#include "spec/observers.h"
#include "spec/tree_loop.h"

namespace mtpspec {

class Request {
 public:
  // Validates the options and the prompt against the target, resets the target and the drafter and
  // runs the prefill. `drafter` may be null (plain decoding). Both must outlive the Request.
  // With `external_lengths`, a k = auto request takes every draft length from DraftLength(fixed)
  // (a batch's controller) and has no policy of its own (so its prompt is never deferred).
  static absl::StatusOr<std::unique_ptr<Request>> Start(Target& target, Drafter* drafter,
                                                        std::span<const int32_t> prompt,
                                                        const GenerateOptions& options,
                                                        bool external_lengths = false);
  Request(const Request&) = delete;
  Request& operator=(const Request&) = delete;

  const LoopContext& context() const { return context_; }
  Target& target() const { return context_.target(); }
  bool done() const { return !state_.stop_reason.empty(); }
  bool tree() const { return tree_; }
  // A k = auto request with a drafter; k_max() is its largest draft length.
  bool adaptive() const { return options_.adaptive_k && context_.drafter() != nullptr && !tree_; }
  int64_t k_max() const { return k_max_; }
  // Marks the cycle under way as an exploration probe (a batch controller's).
  void set_probe(bool probe) { cycle_.probe = probe; }
  // The last cycle's record (after EndCycle, until the next BeginCycle).
  const CycleRecord& last_cycle() const { return cycle_; }
  int64_t generated() const { return static_cast<int64_t>(state_.tokens.size()); }
  // The tokens produced so far, and their log-probabilities when the options ask for them.
  const std::vector<int32_t>& tokens() const { return state_.tokens; }
  const std::vector<float>& logprobs() const { return state_.logprobs; }
  // Ends the request between cycles with stop reason "cancelled" (unless it has already ended).
  void Cancel();

  // Starts the next cycle; false (with the stop reason set) when the token budget or the cache ends
  // the request instead.
  bool BeginCycle();
  // A whole tree cycle (tree requests only): DraftTree, Verify, EndCycle.
  absl::Status RunTreeCycle();
  // Tree requests: grows this cycle's tree (never past the token budget or the cache) and returns
  // its verify block [pending token, nodes …] with the rows' parents in *parents (parents[0] = −1),
  // to verify as Target::RunTree does. A tree without nodes (no room, or the drafter had none)
  // returns the one-row block of a plain step and leaves *parents empty: it verifies as a chain.
  absl::StatusOr<std::vector<int32_t>> DraftTree(std::vector<int32_t>* parents);
  // This cycle's draft length: `fixed` when given (a batch's k schedule), else the policy's choice
  // (k = auto) or the request's k; never past the token budget or the cache.
  int64_t DraftLength(std::optional<int64_t> fixed = std::nullopt);
  // Drafts up to k tokens; returns the verify block [pending token, d1 … dk'].
  absl::StatusOr<std::vector<int32_t>> Draft(int64_t k);
  // The same for a draft proposed elsewhere (a batch's drafter): `draft` is what
  // drafter->Propose(sequence(), k, context().draft_sampling()) returned, in `seconds`.
  std::vector<int32_t> SetDraft(mtpspec::Draft draft, int64_t k, double seconds);
  const std::vector<int32_t>& sequence() const { return state_.sequence; }
  // The block's verify forward on this request's own target (Run, or RunTree for a tree block).
  absl::Status Verify();
  // The block's verify, run elsewhere (a batched forward): `step` must be what
  // target().Run(block, /*all_logits=*/true) would have returned (RunTree(block, parents) for a tree
  // block, the target left as that RunTree leaves it); `seconds` is that forward's time.
  absl::Status SetVerified(TargetStep step, double seconds);
  // Accepts, commits and reports the cycle to the observers.
  absl::Status EndCycle();
  // The result, once done() (or to hand back what a failed request had produced).
  GenerateResult Finish();

 private:
  Request(Target& target, Drafter* drafter, const GenerateOptions& options);

  const GenerateOptions options_;  // a copy: the Request may outlive the caller's options
  const bool tree_;
  const int64_t k_max_;
  const LoopContext context_;
  GenerateResult result_;
  StatsRecorder recorder_;
  std::optional<AdaptivePolicy> adaptive_;  // a fixed-k run has no policy and never calls one
  std::vector<LoopObserver*> observers_;    // the statistics, the policy, the caller's own
  LoopState state_;
  double start_ = 0;  // context_.Now() at the start

  // The cycle under way.
  CycleRecord cycle_;
  double cycle_start_ = 0;
  mtpspec::Draft draft_;
  std::optional<TreeBlock> tree_block_;  // a tree cycle's block, when its tree has nodes
  std::optional<TargetStep> verified_;
};

}  // namespace mtpspec
