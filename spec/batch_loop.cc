#include "spec/batch_loop.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace mtpspec {
namespace {

// The schedule's k for a cycle of `batch` requests.
int64_t ScheduledK(const std::vector<BatchKStep>& schedule, int64_t batch) {
  for (const BatchKStep& step : schedule) {
    if (batch <= step.max_batch) return step.k;
  }
  return schedule.back().k;
}

absl::Status Prefixed(const absl::Status& status, int64_t id) {
  return absl::Status(status.code(), absl::StrCat("request ", id, ": ", status.message()));
}

}  // namespace

BatchStatsRecorder::BatchStatsRecorder(int64_t slots, double start, bool keep_cycle_log)
    : start_(start), keep_cycle_log_(keep_cycle_log) {
  stats_.slots = slots;
  stats_.batch_histogram.assign(slots + 1, 0);
}

void BatchStatsRecorder::OnAdmit(int64_t, int64_t, double, double seconds) { stats_.prefill_seconds += seconds; }

void BatchStatsRecorder::OnCycle(const BatchCycleRecord& r) {
  ++stats_.cycles;
  ++stats_.batch_histogram[r.logged.requests];
  stats_.forwards += r.forwards;
  stats_.batched_forwards += r.batched_forwards;
  stats_.verify_rows += r.verify_rows;
  stats_.max_rows = std::max(stats_.max_rows, r.max_rows);
  stats_.batched_drafts += r.batched_drafts;
  stats_.experts_read += r.logged.experts_read;
  stats_.expert_choices += r.expert_choices;
  stats_.draft_seconds += r.logged.draft_seconds;
  stats_.tree_draft_seconds += r.tree_draft_seconds;
  stats_.verify_seconds += r.logged.verify_seconds;
  stats_.accept_commit_seconds += r.accept_commit_seconds;
  stats_.draft_extend_seconds += r.draft_extend_seconds;
  if (keep_cycle_log_) stats_.cycle_log.push_back(r.logged);
}

void BatchStatsRecorder::OnLeave(int64_t, const absl::Status& status, GenerateResult result, double) {
  ++stats_.requests;
  stats_.failed += !status.ok();
  stats_.generated_tokens += static_cast<int64_t>(result.tokens.size());
}

BatchStats BatchStatsRecorder::Stats(double now) const {
  BatchStats stats = stats_;
  stats.total_seconds = now - start_;
  return stats;
}

BatchLoop::BatchLoop(std::span<const BatchSlot> slots, const BatchOptions& options, int64_t adaptive_k_max,
                     std::vector<BatchObserver*> observers)
    : slots_(slots),
      options_(options),
      clock_(options.clock != nullptr ? *options.clock : SteadyClock()),
      observers_(std::move(observers)),
      seats_(slots.size()) {
  // Drafters the batch drafter takes leave it work to run together while they hold a slot.
  for (const BatchSlot& slot : slots) {
    if (options.drafter != nullptr && slot.drafter != nullptr && options.drafter->CanBatch(*slot.drafter)) {
      options.drafter->SetBatched(*slot.drafter, true);
      enrolled_.push_back(slot.drafter);
    }
  }
  if (adaptive_k_max > 0) controller_ = std::make_unique<BatchDraftController>(adaptive_k_max);
}

BatchLoop::~BatchLoop() {
  for (size_t s = 0; s < seats_.size(); ++s) {
    if (seats_[s].running != nullptr) Leave(s, absl::CancelledError("the batch stopped"));
  }
  for (Drafter* drafter : enrolled_) options_.drafter->SetBatched(*drafter, false);
}

int64_t BatchLoop::free_seats() const {
  return std::count_if(seats_.begin(), seats_.end(), [](const Seat& seat) { return seat.running == nullptr; });
}

bool BatchLoop::Admit(int64_t id, const BatchRequest& request) {
  auto free = std::find_if(seats_.begin(), seats_.end(), [](const Seat& seat) { return seat.running == nullptr; });
  if (free == seats_.end()) return false;
  const size_t s = static_cast<size_t>(free - seats_.begin());
  const double start = clock_.Seconds();
  absl::StatusOr<std::unique_ptr<Request>> started =
      Request::Start(*slots_[s].target, slots_[s].drafter, request.prompt, request.options,
                     /*external_lengths=*/controller_ != nullptr && request.options.adaptive_k);
  const double seconds = clock_.Seconds() - start;
  for (BatchObserver* o : observers_) o->OnAdmit(id, static_cast<int64_t>(s), start, seconds);
  if (!started.ok()) {
    slots_[s].target->Reset();  // nothing of it stays in the slot
    for (BatchObserver* o : observers_) o->OnLeave(id, Prefixed(started.status(), id), {}, clock_.Seconds());
    return true;
  }
  seats_[s].id = id;
  seats_[s].running = std::move(*started);
  for (BatchObserver* o : observers_) o->OnTokens(id, *seats_[s].running);
  if (seats_[s].running->done()) Leave(s, absl::OkStatus());  // its first token ended it
  return true;
}

bool BatchLoop::Cancel(int64_t id) {
  for (size_t s = 0; s < seats_.size(); ++s) {
    if (seats_[s].running == nullptr || seats_[s].id != id) continue;
    seats_[s].running->Cancel();
    Leave(s, absl::OkStatus());
    return true;
  }
  return false;
}

void BatchLoop::Leave(size_t s, const absl::Status& status) {
  Seat& seat = seats_[s];
  GenerateResult result = seat.running->Finish();
  if (!status.ok()) slots_[s].target->Reset();  // nothing of it stays in the slot
  if (controller_) controller_->Forget(seat.id);
  const int64_t id = seat.id;
  seat.running.reset();
  seat.id = -1;
  const absl::Status reported = status.ok() ? status : Prefixed(status, id);
  const double end = clock_.Seconds();
  for (size_t i = 0; i < observers_.size(); ++i) {
    observers_[i]->OnLeave(id, reported, i + 1 < observers_.size() ? result : std::move(result), end);
  }
}

bool BatchLoop::Cycle() {
  const std::vector<size_t> active = BeginCycle();
  if (active.empty()) return false;
  BatchCycleRecord record;
  record.logged.requests = static_cast<int64_t>(active.size());
  const Blocks blocks = DraftPhase(active, record);
  std::vector<absl::Status> verified = VerifyPhase(blocks, record);
  AcceptPhase(blocks, std::move(verified), record);
  for (BatchObserver* o : observers_) o->OnCycle(record);
  return true;
}

std::vector<size_t> BatchLoop::BeginCycle() {
  std::vector<size_t> active;  // seats taking part in this cycle
  for (size_t s = 0; s < seats_.size(); ++s) {
    if (seats_[s].running == nullptr) continue;
    if (seats_[s].running->BeginCycle()) {
      active.push_back(s);
    } else {
      Leave(s, absl::OkStatus());  // its budget or the cache ended it
    }
  }
  return active;
}

// The cycle's draft length for every chain request of `active`: the k schedule's, the request's own
// (fixed, or its own adaptive policy), or, for adaptive requests when the batch has a controller,
// the controller's choice for all of them together.
std::map<size_t, int64_t> BatchLoop::DraftLengths(const std::vector<size_t>& active,
                                                  std::optional<int64_t> scheduled) {
  std::map<size_t, int64_t> lengths;
  std::vector<size_t> tuned;       // seats the controller sets
  std::vector<int64_t> ids, caps;  // [tuned] request ids and the most each may draft
  int64_t other_rows = 0;
  for (size_t s : active) {
    Request& request = *seats_[s].running;
    if (request.tree()) continue;
    if (controller_ != nullptr && request.adaptive()) {
      tuned.push_back(s);
      ids.push_back(seats_[s].id);
      caps.push_back(request.DraftLength(request.k_max()));
      continue;
    }
    lengths[s] = request.DraftLength(scheduled);
    other_rows += lengths[s] + 1;
  }
  if (tuned.empty()) return lengths;
  bool probe = false;
  const std::vector<int64_t> chosen = controller_->Choose(ids, caps, other_rows, &probe);
  for (size_t i = 0; i < tuned.size(); ++i) {
    Request& request = *seats_[tuned[i]].running;
    lengths[tuned[i]] = request.DraftLength(chosen[i]);
    request.set_probe(probe);
  }
  return lengths;
}

BatchLoop::Blocks BatchLoop::DraftPhase(const std::vector<size_t>& active, BatchCycleRecord& record) {
  const std::optional<int64_t> scheduled =
      options_.k_schedule.empty()
          ? std::nullopt
          : std::optional<int64_t>(ScheduledK(options_.k_schedule, static_cast<int64_t>(active.size())));
  Blocks blocks;
  const double start = clock_.Seconds();
  std::vector<std::pair<size_t, int64_t>> together;  // (seat, k) drafted by the batch drafter at once
  const std::map<size_t, int64_t> lengths = DraftLengths(active, scheduled);
  for (size_t s : active) {
    Request& request = *seats_[s].running;
    std::vector<int32_t> parents;
    absl::StatusOr<std::vector<int32_t>> block = absl::InternalError("no draft");
    if (request.tree()) {
      const double tree_start = clock_.Seconds();
      block = request.DraftTree(&parents);
      record.tree_draft_seconds += clock_.Seconds() - tree_start;
    } else {
      const int64_t k = lengths.at(s);
      blocks.depth = std::max(blocks.depth, k);
      record.logged.draft_lengths.push_back(k);
      Drafter* drafter = slots_[s].drafter;
      if (options_.drafter != nullptr && drafter != nullptr && k > 0 && options_.drafter->CanBatch(*drafter)) {
        together.push_back({s, k});
        continue;
      }
      block = request.Draft(k);
    }
    if (!block.ok()) {
      Leave(s, block.status());
      continue;
    }
    blocks.seats.push_back(s);
    blocks.tokens.push_back(std::move(*block));
    blocks.parents.push_back(std::move(parents));
  }
  if (!together.empty()) DraftTogether(together, blocks, record);
  blocks.draft_seconds = clock_.Seconds() - start - record.tree_draft_seconds;
  record.logged.draft_seconds = blocks.draft_seconds;
  for (const std::vector<int32_t>& block : blocks.tokens) record.logged.verify_rows += static_cast<int64_t>(block.size());
  return blocks;
}

// One batched Propose for the chains whose drafters batch.
void BatchLoop::DraftTogether(const std::vector<std::pair<size_t, int64_t>>& together, Blocks& blocks,
                              BatchCycleRecord& record) {
  std::vector<Drafter*> drafters;
  std::vector<std::span<const int32_t>> sequences;
  std::vector<int64_t> ks;
  std::vector<DraftSampling> samplings;
  for (const auto& [s, k] : together) {
    drafters.push_back(slots_[s].drafter);
    sequences.push_back(seats_[s].running->sequence());
    ks.push_back(k);
    samplings.push_back(seats_[s].running->context().draft_sampling());
  }
  const double start = clock_.Seconds();
  std::vector<absl::StatusOr<Draft>> drafts = options_.drafter->ProposeBatch(drafters, sequences, ks, samplings);
  const double seconds = clock_.Seconds() - start;
  record.batched_drafts = 1;
  for (size_t i = 0; i < together.size(); ++i) {
    const auto [s, k] = together[i];
    if (!drafts[i].ok()) {
      Leave(s, drafts[i].status());
      continue;
    }
    blocks.seats.push_back(s);
    blocks.tokens.push_back(seats_[s].running->SetDraft(std::move(*drafts[i]), k, seconds));
    blocks.parents.emplace_back();
  }
}

// One forward for the blocks the verifier can batch; the rest (and a batch that fails, so that its
// error lands on the request at fault) verify alone.
std::vector<absl::Status> BatchLoop::VerifyPhase(const Blocks& blocks, BatchCycleRecord& record) {
  const double start = clock_.Seconds();
  std::vector<size_t> batched, alone;  // indices into blocks
  for (size_t i = 0; i < blocks.seats.size(); ++i) {
    const Request& request = *seats_[blocks.seats[i]].running;
    const bool joins = options_.verifier != nullptr && !request.context().device_sampling() &&
                       (blocks.parents[i].empty() ? options_.verifier->CanBatch(request.target())
                                                  : options_.verifier->CanBatchTree(request.target()));
    (joins ? batched : alone).push_back(i);
  }
  std::vector<absl::Status> status(blocks.seats.size());
  if (!batched.empty()) {
    std::vector<Target*> targets;
    std::vector<std::vector<int32_t>> batch_blocks, batch_parents;
    for (size_t i : batched) {
      targets.push_back(&seats_[blocks.seats[i]].running->target());
      batch_blocks.push_back(blocks.tokens[i]);
      batch_parents.push_back(blocks.parents[i]);
    }
    const double forward_start = clock_.Seconds();
    absl::StatusOr<BatchVerification> verified =
        options_.verifier->VerifyBatchWithTrees(targets, batch_blocks, batch_parents);
    const double seconds = clock_.Seconds() - forward_start;
    if (verified.ok() && verified->steps.size() != batched.size()) {
      const absl::Status wrong = absl::InternalError(
          absl::StrCat("the batch verifier returned ", verified->steps.size(), " results for ", batched.size(), " blocks"));
      for (size_t i : batched) status[i] = wrong;
    } else if (verified.ok()) {
      ++record.forwards;
      ++record.batched_forwards;
      record.verify_rows += verified->rows;
      record.max_rows = std::max(record.max_rows, verified->rows);
      record.logged.experts_read += verified->experts_read;
      record.expert_choices += verified->expert_choices;
      for (size_t j = 0; j < batched.size(); ++j) {
        status[batched[j]] = seats_[blocks.seats[batched[j]]].running->SetVerified(std::move(verified->steps[j]), seconds);
      }
    } else {  // every target is as it was: verify each alone
      alone.insert(alone.end(), batched.begin(), batched.end());
    }
  }
  for (size_t i : alone) {
    status[i] = seats_[blocks.seats[i]].running->Verify();
    ++record.forwards;
    const int64_t rows = static_cast<int64_t>(blocks.tokens[i].size());
    record.verify_rows += rows;
    record.max_rows = std::max(record.max_rows, rows);
  }
  record.logged.verify_seconds = clock_.Seconds() - start;
  return status;
}

// Acceptance, commit and rollback, per request; a request that finished or failed leaves, and its
// seat is free for the next cycle.
void BatchLoop::AcceptPhase(const Blocks& blocks, std::vector<absl::Status> verified, BatchCycleRecord& record) {
  const double start = clock_.Seconds();
  int64_t extending = 0;
  double extend_seconds = 0;    // the drafting requests' extends, wherever they ran
  double catch_up_seconds = 0;  // the part of them that ran in this cycle's draft phase
  for (size_t i = 0; i < blocks.seats.size(); ++i) {
    const size_t s = blocks.seats[i];
    Request& request = *seats_[s].running;
    absl::Status status = verified[i];
    if (status.ok()) status = request.EndCycle();
    if (status.ok()) {
      const CycleRecord& cycle = request.last_cycle();
      if (!cycle.tree) catch_up_seconds += cycle.catch_up_seconds;
      if (controller_) {
        if (request.adaptive()) controller_->RecordAcceptance(seats_[s].id, cycle.drafted, cycle.accepted);
        if (cycle.drafted > 0 && !cycle.tree) {  // the controller prices chain cycles
          ++extending;
          extend_seconds += cycle.catch_up_seconds + cycle.extend_seconds;
        }
      }
      for (BatchObserver* o : observers_) o->OnTokens(seats_[s].id, request);
    }
    if (!status.ok() || request.done()) Leave(s, status);
  }
  record.accept_commit_seconds = clock_.Seconds() - start;
  record.draft_extend_seconds = catch_up_seconds;
  if (controller_) {
    controller_->RecordCycle(record.logged.verify_rows, record.logged.verify_seconds, blocks.depth,
                             std::max(0.0, blocks.draft_seconds - catch_up_seconds), extending, extend_seconds);
  }
}

}  // namespace mtpspec
