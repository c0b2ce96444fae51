// The speculative loop's steps. Generate (spec/generator.h) composes them:
//
//   PrefillStep                      the prompt through the target, the first token, the drafter's prompt
//   repeat until a stop:
//     DraftStep   → Draft            the drafter proposes up to k tokens
//     VerifyStep  → TargetStep       one target forward over [pending token, d1 … dk]
//     AcceptStep  → AcceptResult     the rule accepts m drafts and emits one more token
//     CommitStep                     the emitted tokens are committed (EOS and the budget may cut
//                                    them), the target rolls back to them, the drafter observes them
//
// Each step reads the request's fixed LoopContext, reads or advances the LoopState, and fills its
// part of the cycle's CycleRecord with what it did and how long it took. Observers (statistics,
// the adaptive-k controller, a caller's own) see the loop only through those records. A token tree
// replaces DraftStep, VerifyStep and AcceptStep (spec/tree_loop.h); a batch runs one verify forward
// for the VerifySteps of many requests (spec/batch.h). spec/request.h drives one request's steps.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/clock.h"
#include "spec/interfaces.h"
#include "spec/stats.h"
#include "verify/acceptance.h"

namespace mtpspec {

struct GenerateOptions;

// What the prefill did.
struct PrefillRecord {
  int64_t prompt_tokens = 0;
  bool sampled_first = false;   // false when max_new_tokens = 0
  bool prompt_deferred = false;  // the drafter left the prompt for a later Propose
  double target_seconds = 0;    // the prompt's forward
  double sample_seconds = 0;    // drawing the first token
  double drafter_seconds = 0;   // the drafter's work on the prompt
};

// What one cycle did, step by step.
struct CycleRecord {
  bool probe = false;           // the draft length was an adaptive-k exploration probe
  int64_t drafted = 0;          // drafts verified (≤ the k chosen)
  int64_t accepted = 0;         // drafts accepted
  int64_t committed = 0;        // tokens committed (accepted + 1, unless EOS or the budget cut them)
  bool observed = false;        // the drafter observed the committed rows
  bool last = false;            // generation stopped in this cycle
  double draft_seconds = 0;     // the drafter's Propose, without its catch-up
  double catch_up_seconds = 0;  // work the drafter had deferred during plain steps
  double verify_seconds = 0;    // the target's forward
  double accept_seconds = 0;    // sampling and the acceptance rule
  double commit_seconds = 0;    // committing, the rollback and the token callback
  double extend_seconds = 0;    // the drafter's Observe of the committed rows
  double cycle_seconds = 0;     // the whole cycle
  // Tree cycles (spec/tree_loop.h): `drafted` counts the tree's nodes.
  bool tree = false;
  int64_t tree_depth = 0;                // the deepest node verified
  std::vector<int64_t> accepted_ranks;   // [accepted] each accepted node's rank among its siblings
};

// Watches the loop. Generate's statistics are one observer; GenerateOptions::observer adds another.
class LoopObserver {
 public:
  virtual ~LoopObserver() = default;
  virtual void OnPrefill(const PrefillRecord& record) {}
  virtual void OnCycle(const CycleRecord& record) {}
};

// Chooses each cycle's draft length, watching the loop to learn (the adaptive-k controller). A
// fixed-k run has none.
class DraftLengthPolicy : public LoopObserver {
 public:
  // Before the drafter sees the prompt: whether it may defer the prompt's work (Drafter::DeferPrompt)
  // for a request of `prompt_rows` rows that may produce `tokens_left` more tokens.
  virtual bool DeferPrompt(int64_t prompt_rows, int64_t tokens_left) { return false; }
  // The draft length of the next cycle, for a request that may produce `tokens_left` more tokens,
  // and whether it is an exploration probe.
  virtual int64_t Choose(int64_t tokens_left, bool* probe) = 0;
};

// What stays fixed during one request.
class LoopContext {
 public:
  LoopContext(Target& target, Drafter* drafter, const GenerateOptions& options);

  Target& target() const { return target_; }
  Drafter* drafter() const { return drafter_; }
  const GenerateOptions& options() const { return options_; }
  // Now, in seconds, on the options' clock.
  double Now() const { return clock_.Seconds(); }
  int64_t vocab() const { return vocab_; }
  // The target draws the tokens where its logits live (sampler-equality with argmax drafts): only
  // ids cross to the host.
  bool device_sampling() const { return device_sampling_; }
  const DraftSampling& draft_sampling() const { return draft_sampling_; }
  // Why emitting `token` ends the request: "eos" (an end-of-sequence id: the options' override, or
  // the target's), "stop_token" (one of options.stop_token_ids), or "" when it does not.
  std::string StopReasonOf(int32_t token) const;
  // A target forward, keeping the logits on the device when it samples there.
  absl::StatusOr<TargetStep> Run(std::span<const int32_t> tokens, bool all_logits) const;
  // What Run checks in a forward's logits ([R, V], the last R of `rows` rows run from
  // first_position): a non-finite value stops the request, naming its position.
  absl::Status CheckLogits(const Tensor& logits, int64_t first_position, int64_t rows) const;
  // A tree verify (Target::RunTree), its logits checked as Run checks them.
  absl::StatusOr<TargetStep> RunTree(std::span<const int32_t> tokens, std::span<const int32_t> parents) const;
  // The target's draws for the `rows` rows of its last run, row r at position first_position + r.
  absl::StatusOr<std::vector<int32_t>> DeviceDraws(int64_t rows, int64_t first_position) const;

 private:
  Target& target_;
  Drafter* drafter_;
  const GenerateOptions& options_;
  const Clock& clock_;
  int64_t vocab_;
  std::vector<int64_t> eos_;  // empty when stop_at_eos is off
  bool device_sampling_;
  DraftSampling draft_sampling_;
};

// What the loop has produced so far.
struct LoopState {
  std::vector<int32_t> sequence;  // the prompt and every committed token; the last is pending
  std::vector<int32_t> tokens;    // the generated tokens only
  std::vector<float> logprobs;    // [tokens] with options.logprobs: each token's raw log-probability
  std::string stop_reason;        // empty while running
  // The pending token's position: the committed target rows are 0 … n − 1.
  int64_t pending_position() const { return static_cast<int64_t>(sequence.size()) - 1; }
  // Tokens the request may still produce: its budget, and never past the cache.
  int64_t TokensLeft(const LoopContext& context) const;
};

// Runs the prompt, draws the first token and gives the drafter the prompt's rows (deferred when the
// policy says so). Sets state.stop_reason when the first token already ends the request.
absl::Status PrefillStep(const LoopContext& context, std::span<const int32_t> prompt, DraftLengthPolicy* policy,
                         LoopState& state, PrefillRecord& record);
// Up to k drafts (none when k is 0 or there is no drafter).
absl::StatusOr<Draft> DraftStep(const LoopContext& context, const LoopState& state, int64_t k, CycleRecord& record);
// DraftStep's bookkeeping for a draft proposed elsewhere (a batch's drafter, spec/batch.h): trims
// it to k and records it, `seconds` being the Propose's wall time with its catch-up.
void RecordDraft(Draft& draft, int64_t k, double seconds, CycleRecord& record);
// The target's forward over [pending token, drafts], with logits for every row.
absl::StatusOr<TargetStep> VerifyStep(const LoopContext& context, const LoopState& state, const Draft& draft,
                                      CycleRecord& record);
// The acceptance rule over the verified rows: accepted drafts plus one emitted token.
absl::StatusOr<AcceptResult> AcceptStep(const LoopContext& context, const LoopState& state, const Draft& draft,
                                        const TargetStep& verified, CycleRecord& record);
// Commits the emitted tokens one by one (EOS and the budget cut them anywhere), rolls the target
// back to the committed rows, reports them to on_tokens and lets the drafter observe them.
absl::Status CommitStep(const LoopContext& context, const AcceptResult& accepted, const TargetStep& verified,
                        LoopState& state, CycleRecord& record);

}  // namespace mtpspec
