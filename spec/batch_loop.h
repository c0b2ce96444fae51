// The phases of a batch cycle (spec/batch.h), shared by GenerateBatch, which runs a fixed list of
// requests, and BatchEngine (spec/batch_engine.h), whose requests arrive and leave while it runs:
//
//   Admit           a free seat takes a request; its prefill runs alone
//   Cycle:
//     BeginCycle    requests the budget or the cache ended leave
//     DraftPhase    trees, chains drafting alone, and the batch drafter's chains together
//     VerifyPhase   one forward for the blocks the verifier takes; the rest (and a forward that
//                   fails) verify alone
//     AcceptPhase   acceptance, commit and rollback per request; finished requests leave
//
// Observers watch the loop through records (BatchObserver), as StatsRecorder watches one request:
// the statistics (BatchStatsRecorder), GenerateBatch's results and the engine's events.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "spec/batch.h"
#include "spec/batch_k.h"
#include "spec/request.h"

namespace mtpspec {

// What one cycle did, as its phases report it.
struct BatchCycleRecord {
  BatchCycle logged;              // requests, draft lengths, verify rows, experts read, seconds
  int64_t forwards = 0;           // verify forwards (a batched forward counts once)
  int64_t batched_forwards = 0;   // … of which the verifier's
  int64_t verify_rows = 0;        // rows over the cycle's forwards
  int64_t max_rows = 0;           // the most rows in one of them
  int64_t expert_choices = 0;     // the batched rows' routing choices
  int64_t batched_drafts = 0;     // BatchDrafter calls (0 or 1)
  double tree_draft_seconds = 0;  // the tree requests' own drafting
  double accept_commit_seconds = 0;
  double draft_extend_seconds = 0;  // of the draft phase: the drafters' extends of earlier commits
};

// Sees the loop's records. Every call comes from the thread that runs the loop.
class BatchObserver {
 public:
  virtual ~BatchObserver() = default;
  // Request `id` took seat `seat` at clock time `start` and prefilled in `seconds`.
  virtual void OnAdmit(int64_t id, int64_t seat, double start, double seconds) {}
  // Request `id` committed tokens (its prefill's first token, or a cycle's): request.tokens() holds
  // every token it has produced so far (request.logprobs() theirs, when asked).
  virtual void OnTokens(int64_t id, const Request& request) {}
  virtual void OnCycle(const BatchCycleRecord& record) {}
  // Request `id` ended at clock time `end`: `status` is ok when it finished (or was cancelled), else
  // why it failed; `result` is what it produced.
  virtual void OnLeave(int64_t id, const absl::Status& status, GenerateResult result, double end) {}
};

// The batch statistics (BatchStats), from the records.
class BatchStatsRecorder : public BatchObserver {
 public:
  // `keep_cycle_log`: keep every cycle's record in BatchStats::cycle_log (a fixed list of requests), or
  // only the totals (a live engine).
  BatchStatsRecorder(int64_t slots, double start, bool keep_cycle_log = true);
  void OnAdmit(int64_t id, int64_t seat, double start, double seconds) override;
  void OnCycle(const BatchCycleRecord& record) override;
  void OnLeave(int64_t id, const absl::Status& status, GenerateResult result, double end) override;
  // The statistics so far, total_seconds up to `now`.
  BatchStats Stats(double now) const;

 private:
  BatchStats stats_;
  double start_ = 0;
  bool keep_cycle_log_ = true;
};

class BatchLoop {
 public:
  // `slots` and `options` (its verifier, drafter and clock) must outlive the loop. `adaptive_k_max`:
  // the largest k of the k = auto requests the loop will run (0: none), for their shared controller.
  // `observers` are not owned.
  BatchLoop(std::span<const BatchSlot> slots, const BatchOptions& options, int64_t adaptive_k_max,
            std::vector<BatchObserver*> observers);
  ~BatchLoop();
  BatchLoop(const BatchLoop&) = delete;
  BatchLoop& operator=(const BatchLoop&) = delete;

  const Clock& clock() const { return clock_; }
  int64_t free_seats() const;
  int64_t seated() const { return static_cast<int64_t>(seats_.size()) - free_seats(); }
  // Seats request `id` and prefills it; false (nothing done) when every seat is taken. A request whose
  // options or prompt are refused, or whose first token ends it, leaves at once.
  bool Admit(int64_t id, const BatchRequest& request);
  // Ends seated request `id` now, with stop reason "cancelled"; false when it holds no seat.
  bool Cancel(int64_t id);
  // One cycle over the seated requests; false when none took part (every seat free, or each request
  // left before drafting).
  bool Cycle();

 private:
  struct Seat {
    int64_t id = -1;                   // the request's id; -1 while free
    std::unique_ptr<Request> running;  // null while free
  };
  // The cycle's verify blocks.
  struct Blocks {
    std::vector<size_t> seats;                 // seats whose block is verified
    std::vector<std::vector<int32_t>> tokens;  // [seats] the verify blocks
    std::vector<std::vector<int32_t>> parents; // [seats] a tree block's parents (empty: a chain)
    int64_t depth = 0;                         // the deepest chain draft
    double draft_seconds = 0;                  // the draft phase without the trees
  };

  std::vector<size_t> BeginCycle();
  std::map<size_t, int64_t> DraftLengths(const std::vector<size_t>& active, std::optional<int64_t> scheduled);
  Blocks DraftPhase(const std::vector<size_t>& active, BatchCycleRecord& record);
  void DraftTogether(const std::vector<std::pair<size_t, int64_t>>& together, Blocks& blocks, BatchCycleRecord& record);
  std::vector<absl::Status> VerifyPhase(const Blocks& blocks, BatchCycleRecord& record);
  void AcceptPhase(const Blocks& blocks, std::vector<absl::Status> verified, BatchCycleRecord& record);
  void Leave(size_t seat, const absl::Status& status);

  std::span<const BatchSlot> slots_;
  const BatchOptions& options_;
  const Clock& clock_;
  std::vector<BatchObserver*> observers_;
  std::vector<Seat> seats_;
  std::vector<Drafter*> enrolled_;  // drafters the batch drafter batches, while the loop lives
  // One draft-length controller for the k = auto requests (spec/batch_k.h); null without them.
  std::unique_ptr<BatchDraftController> controller_;
};

}  // namespace mtpspec
