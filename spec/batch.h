// Speculative decoding for a batch of requests (continuous batching). Each request has its own
// prompt, options (sampling, seed, k, drafter settings), target cache and drafter state, held in one
// of B slots. Every cycle drafts for each request in the batch, runs one target forward over all
// their verify blocks (BatchVerifier: block-diagonal attention, each request seeing only its own
// cache) and then accepts, commits and rolls back per request. A request that finishes leaves its
// slot, and the next queued request takes it before the next cycle (its prefill runs alone).
//
// Exactness: every request's tokens equal those of the same request run alone through Generate,
// whatever the batch around it, since the batched forward gives each sequence the bits of its own
// forward (Model::ForwardBatch) and everything else is the request's own.
//
// Tree requests draft their own trees and verify them in the same forward, each under its tree mask
// (BatchVerifier::VerifyBatchWithTrees), where the verifier takes trees. Requests that cannot join a
// batched forward (those that sample where their logits live, and trees the verifier refuses) verify
// alone in the same cycle.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "spec/generator.h"
#include "spec/interfaces.h"

namespace mtpspec {

// A seat for one request at a time: a target (its cache) and the drafter that goes with it (null:
// plain decoding). Slots must not share a target or a drafter.
struct BatchSlot {
  Target* target = nullptr;
  Drafter* drafter = nullptr;
};

struct BatchRequest {
  std::vector<int32_t> prompt;
  GenerateOptions options;
};

// A draft length by batch size (vLLM's schedule): a cycle of B requests drafts k from the first
// entry with max_batch >= B (the last entry beyond them all).
struct BatchKStep {
  int64_t max_batch = 1;
  int64_t k = 0;
};

struct BatchOptions {
  // Runs the batch's verify blocks in one forward; null verifies each request alone (the same
  // tokens; what batching saves is then not measured).
  BatchVerifier* verifier = nullptr;
  // Proposes for the batch's requests at once where it can batch their drafters (MtpBatchDrafter:
  // one MTP forward per draft depth); null drafts each request alone (the same tokens).
  BatchDrafter* drafter = nullptr;
  // Replaces every chain request's k (requests with adaptive k are refused). Empty: each request's
  // own k, fixed or adaptive.
  std::vector<BatchKStep> k_schedule;
  // Where the batch loop reads the time. Not owned; null: SteadyClock().
  const Clock* clock = nullptr;
};

// One batch cycle as it ran: the requests in it, the draft length each chain request drafted, the
// rows of the cycle's verify forwards, the routed experts those forwards read (summed over MoE
// layers), and the cycle's draft and verify seconds. A cost model prices a run from these
// (bench/batch_schedule.h), and a notebook reads the expert union and rows per forward from them.
struct BatchCycle {
  int64_t requests = 0;
  std::vector<int64_t> draft_lengths;  // [chain requests] k' each drafted (0: a plain step)
  int64_t verify_rows = 0;
  int64_t experts_read = 0;
  double draft_seconds = 0, verify_seconds = 0;
  nlohmann::json ToJson() const;
};

// How the batch ran, over all its cycles.
struct BatchStats {
  int64_t slots = 0;
  int64_t requests = 0;
  int64_t failed = 0;             // requests that ended with an error status
  int64_t generated_tokens = 0;   // over all requests
  int64_t cycles = 0;             // batch cycles (each drafts for every active request)
  int64_t forwards = 0;           // target verify forwards (a batched forward counts once)
  int64_t batched_forwards = 0;   // … of which BatchVerifier forwards
  int64_t verify_rows = 0;        // rows over all verify forwards
  int64_t max_rows = 0;           // the most rows in one forward
  int64_t batched_drafts = 0;     // BatchDrafter calls (each runs the cycle's drafts together)
  std::vector<int64_t> batch_histogram;  // [slots + 1] cycles by active requests
  // Routed experts read by the batched forwards, summed over MoE layers and forwards, and what the
  // same rows would read one expert per routed row (their routing choices, no union).
  int64_t experts_read = 0;
  int64_t expert_choices = 0;
  // Wall time: the prefills, the drafts, the verify forwards, acceptance with commit (and the extends
  // of drafters that are not batched),
  // the tree requests' drafting (each grows its own tree; not part of draft_seconds), and the whole run.
  double prefill_seconds = 0, draft_seconds = 0, verify_seconds = 0, accept_commit_seconds = 0;
  double tree_draft_seconds = 0;
  // Of draft_seconds: the drafters' extends of earlier commits that ran with the drafts (a batch's
  // MTP drafters extend together there, one forward for all of them).
  double draft_extend_seconds = 0;
  double total_seconds = 0;
  std::vector<BatchCycle> cycle_log;  // [cycles] each cycle, in order

  double tokens_per_second() const { return total_seconds > 0 ? generated_tokens / total_seconds : 0.0; }
  double rows_per_forward() const { return forwards > 0 ? static_cast<double>(verify_rows) / forwards : 0.0; }
  double mean_batch() const;
  nlohmann::json ToJson() const;
  std::string Summary() const;
};

struct BatchRequestResult {
  absl::Status status;      // an error ends this request only; the others run on
  GenerateResult result;    // what it produced (up to the error, if any)
  int64_t slot = -1;        // the slot that served it (−1: refused before it took one)
  double queued_seconds = 0;   // from the batch's start to its prefill
  double latency_seconds = 0;  // from the batch's start to its last token
  double tokens_per_second() const;  // its tokens over its time in a slot
};

struct BatchResult {
  std::vector<BatchRequestResult> requests;  // in the order given
  BatchStats stats;
};

// Entries with k in [0, kMaxDraftTokens] and max_batch >= 1, ascending.
absl::Status ValidateKSchedule(std::span<const BatchKStep> schedule);

// Checks that hold before anything runs: at least one slot, distinct targets and drafters, a valid
// k schedule and no adaptive-k controller shared by two requests. Errors name the slot or request.
absl::Status ValidateBatch(std::span<const BatchSlot> slots, std::span<const BatchRequest> requests,
                           const BatchOptions& options);

// Runs every request, at most slots.size() at a time, in order of the queue. A request whose
// options or prompt are refused, or whose step fails, gets its own error status and frees its slot;
// the others are not affected. Errors of the batch as a whole (ValidateBatch) return a status.
absl::StatusOr<BatchResult> GenerateBatch(std::span<const BatchSlot> slots, std::span<const BatchRequest> requests,
                                          const BatchOptions& options = {});

}  // namespace mtpspec
