#include "spec/batch.h"

#include <algorithm>
#include <memory>
#include <optional>
#include <map>
#include <set>
#include <sstream>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "spec/batch_k.h"
#include "spec/request.h"

namespace mtpspec {
namespace {

// The schedule's k for a cycle of `batch` requests.
int64_t ScheduledK(const std::vector<BatchKStep>& schedule, int64_t batch) {
  for (const BatchKStep& step : schedule) {
    if (batch <= step.max_batch) return step.k;
  }
  return schedule.back().k;
}

absl::Status Prefixed(const absl::Status& status, const std::string& prefix) {
  return absl::Status(status.code(), absl::StrCat(prefix, status.message()));
}

// One occupied slot.
struct Seat {
  int64_t request = -1;              // index into the queue
  std::unique_ptr<Request> running;  // null while free
};

// The cycle's draft length for every chain request of `active`: the k schedule's, the request's own
// (fixed, or its own adaptive policy), or, for adaptive requests when the batch has a controller,
// the controller's choice for all of them together.
std::map<size_t, int64_t> DraftLengths(std::vector<Seat>& seats, const std::vector<size_t>& active,
                                       std::optional<int64_t> scheduled, BatchDraftController* controller) {
  std::map<size_t, int64_t> lengths;
  std::vector<size_t> tuned;      // seats the controller sets
  std::vector<int64_t> ids, caps;  // [tuned] request ids and the most each may draft
  int64_t other_rows = 0;
  for (size_t s : active) {
    Request& request = *seats[s].running;
    if (request.tree()) continue;
    if (controller != nullptr && request.adaptive()) {
      tuned.push_back(s);
      ids.push_back(seats[s].request);
      caps.push_back(request.DraftLength(request.k_max()));
      continue;
    }
    lengths[s] = request.DraftLength(scheduled);
    other_rows += lengths[s] + 1;
  }
  if (tuned.empty()) return lengths;
  bool probe = false;
  const std::vector<int64_t> chosen = controller->Choose(ids, caps, other_rows, &probe);
  for (size_t i = 0; i < tuned.size(); ++i) {
    Request& request = *seats[tuned[i]].running;
    lengths[tuned[i]] = request.DraftLength(chosen[i]);
    request.set_probe(probe);
  }
  return lengths;
}

}  // namespace

double BatchStats::mean_batch() const {
  int64_t weighted = 0;
  for (size_t b = 0; b < batch_histogram.size(); ++b) weighted += static_cast<int64_t>(b) * batch_histogram[b];
  return cycles > 0 ? static_cast<double>(weighted) / cycles : 0.0;
}

nlohmann::json BatchCycle::ToJson() const {
  return {{"requests", requests}, {"draft_lengths", draft_lengths}, {"verify_rows", verify_rows},
          {"experts_read", experts_read}, {"draft_seconds", draft_seconds}, {"verify_seconds", verify_seconds}};
}

nlohmann::json BatchStats::ToJson() const {
  nlohmann::json j;
  j["slots"] = slots;
  j["requests"] = requests;
  j["failed"] = failed;
  j["generated_tokens"] = generated_tokens;
  j["cycles"] = cycles;
  j["forwards"] = forwards;
  j["batched_forwards"] = batched_forwards;
  j["verify_rows"] = verify_rows;
  j["rows_per_forward"] = rows_per_forward();
  j["max_rows"] = max_rows;
  j["batched_drafts"] = batched_drafts;
  j["mean_batch"] = mean_batch();
  j["batch_histogram"] = batch_histogram;
  j["experts_read"] = experts_read;
  j["expert_choices"] = expert_choices;
  j["tokens_per_second"] = tokens_per_second();
  j["seconds"] = {{"prefill", prefill_seconds}, {"draft", draft_seconds}, {"verify", verify_seconds},
                  {"accept_commit", accept_commit_seconds}, {"tree_drafts", tree_draft_seconds},
                  {"draft_extends", draft_extend_seconds}, {"total", total_seconds}};
  j["cycle_log"] = nlohmann::json::array();
  for (const BatchCycle& c : cycle_log) j["cycle_log"].push_back(c.ToJson());
  return j;
}

std::string BatchStats::Summary() const {
  std::ostringstream out;
  out << absl::StrFormat("batch: %d requests (%d failed) over %d slots, %d tokens in %.3f s = %.1f tokens/s\n",
                         requests, failed, slots, generated_tokens, total_seconds, tokens_per_second());
  out << absl::StrFormat("cycles: %d, mean batch %.2f; verify forwards %d (%d batched), %.2f rows per forward (max %d); "
                         "%d batched drafts\n",
                         cycles, mean_batch(), forwards, batched_forwards, rows_per_forward(), max_rows,
                         batched_drafts);
  if (expert_choices > 0) {
    out << absl::StrFormat("routed experts read: %d for %d routing choices (%.3f per choice)\n", experts_read,
                           expert_choices, static_cast<double>(experts_read) / expert_choices);
  }
  out << absl::StrFormat("time: prefill %.3f s, draft %.3f s (extends %.3f s), verify %.3f s, accept+commit %.3f s\n",
                         prefill_seconds, draft_seconds, draft_extend_seconds, verify_seconds, accept_commit_seconds);
  return out.str();
}

double BatchRequestResult::tokens_per_second() const {
  const double seconds = latency_seconds - queued_seconds;
  return seconds > 0 ? static_cast<double>(result.tokens.size()) / seconds : 0.0;
}

absl::Status ValidateKSchedule(std::span<const BatchKStep> schedule) {
  for (size_t i = 0; i < schedule.size(); ++i) {
    const BatchKStep& step = schedule[i];
    if (step.k < 0 || step.k > kMaxDraftTokens) {
      return absl::InvalidArgumentError(
          absl::StrCat("k_schedule[", i, "]: k must be in [0, ", kMaxDraftTokens, "], got ", step.k));
    }
    if (step.max_batch < 1 || (i > 0 && step.max_batch <= schedule[i - 1].max_batch)) {
      return absl::InvalidArgumentError(absl::StrCat("k_schedule[", i, "]: max_batch = ", step.max_batch,
                                                     " must be >= 1 and above the entry before"));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateBatch(std::span<const BatchSlot> slots, std::span<const BatchRequest> requests,
                           const BatchOptions& options) {
  if (slots.empty()) return absl::InvalidArgumentError("a batch needs at least one slot (batch size B >= 1), got 0");
  std::set<const void*> seen;
  for (size_t s = 0; s < slots.size(); ++s) {
    if (slots[s].target == nullptr) return absl::InvalidArgumentError(absl::StrCat("batch slot ", s, " has no target"));
    if (!seen.insert(slots[s].target).second) {
      return absl::InvalidArgumentError(absl::StrCat("batch slot ", s, " shares its target with an earlier slot"));
    }
    if (slots[s].drafter != nullptr && !seen.insert(slots[s].drafter).second) {
      return absl::InvalidArgumentError(absl::StrCat("batch slot ", s, " shares its drafter with an earlier slot"));
    }
  }
  RETURN_IF_ERROR(ValidateKSchedule(options.k_schedule));
  std::vector<std::pair<const AdaptiveK*, size_t>> controllers;
  for (size_t r = 0; r < requests.size(); ++r) {
    const GenerateOptions& o = requests[r].options;
    if (!options.k_schedule.empty() && o.adaptive_k) {
      return absl::InvalidArgumentError(
          absl::StrCat("request ", r, " asks for adaptive k, which conflicts with the batch's k schedule"));
    }
    if (o.adaptive_controller == nullptr) continue;
    for (const auto& [controller, earlier] : controllers) {
      if (controller == o.adaptive_controller.get() && slots.size() > 1) {
        return absl::InvalidArgumentError(
            absl::StrCat("requests ", earlier, " and ", r, " share one adaptive-k controller, which serves one request at "
                         "a time; give each request its own (or none)"));
      }
    }
    controllers.emplace_back(o.adaptive_controller.get(), r);
  }
  return absl::OkStatus();
}

absl::StatusOr<BatchResult> GenerateBatch(std::span<const BatchSlot> slots, std::span<const BatchRequest> requests,
                                          const BatchOptions& options) {
  RETURN_IF_ERROR(ValidateBatch(slots, requests, options));
  // Drafters the batch drafter takes leave it work to run together while they hold a slot.
  std::vector<Drafter*> enrolled;
  for (const BatchSlot& slot : slots) {
    if (options.drafter != nullptr && slot.drafter != nullptr && options.drafter->CanBatch(*slot.drafter)) {
      options.drafter->SetBatched(*slot.drafter, true);
      enrolled.push_back(slot.drafter);
    }
  }
  absl::Cleanup release = [&] {
    for (Drafter* drafter : enrolled) options.drafter->SetBatched(*drafter, false);
  };
  const Clock& clock = options.clock != nullptr ? *options.clock : SteadyClock();
  auto since = [&clock](double start) { return clock.Seconds() - start; };
  const double start = clock.Seconds();
  BatchResult out;
  out.requests.resize(requests.size());
  BatchStats& stats = out.stats;
  stats.slots = static_cast<int64_t>(slots.size());
  stats.requests = static_cast<int64_t>(requests.size());
  stats.batch_histogram.assign(slots.size() + 1, 0);
  std::vector<Seat> seats(slots.size());
  size_t next = 0;  // the queue's next request
  // One draft-length controller for the batch's adaptive-k requests (spec/batch_k.h), each
  // request's k its cap.
  std::unique_ptr<BatchDraftController> controller;
  int64_t k_max = 0;
  for (const BatchRequest& r : requests) {
    if (r.options.adaptive_k) k_max = std::max<int64_t>(k_max, std::max<int64_t>(r.options.k, 1));
  }
  if (k_max > 0) controller = std::make_unique<BatchDraftController>(k_max);

  // Ends the request in seat s, with `status` (ok when it finished) and what it produced.
  auto leave = [&](size_t s, const absl::Status& status) {
    Seat& seat = seats[s];
    BatchRequestResult& r = out.requests[seat.request];
    r.status = status.ok() ? status : Prefixed(status, absl::StrCat("request ", seat.request, ": "));
    r.result = seat.running->Finish();
    r.latency_seconds = since(start);
    stats.generated_tokens += static_cast<int64_t>(r.result.tokens.size());
    if (!status.ok()) {
      ++stats.failed;
      slots[s].target->Reset();  // nothing of it stays in the slot
    }
    if (controller) controller->Forget(seat.request);
    seat.running.reset();
    seat.request = -1;
  };

  while (true) {
    // Free slots take the next queued requests; each prefill runs alone.
    for (size_t s = 0; s < seats.size(); ++s) {
      while (seats[s].running == nullptr && next < requests.size()) {
        const size_t r = next++;
        BatchRequestResult& result = out.requests[r];
        result.slot = static_cast<int64_t>(s);
        result.queued_seconds = since(start);
        const double t = clock.Seconds();
        absl::StatusOr<std::unique_ptr<Request>> started =
            Request::Start(*slots[s].target, slots[s].drafter, requests[r].prompt, requests[r].options,
                           /*external_lengths=*/controller != nullptr && requests[r].options.adaptive_k);
        stats.prefill_seconds += since(t);
        if (!started.ok()) {
          result.status = Prefixed(started.status(), absl::StrCat("request ", r, ": "));
          result.latency_seconds = since(start);
          ++stats.failed;
          slots[s].target->Reset();
          continue;
        }
        seats[s].request = static_cast<int64_t>(r);
        seats[s].running = std::move(*started);
        if (seats[s].running->done()) leave(s, absl::OkStatus());  // its first token ended it
      }
    }
    // Requests whose budget, cache or first token ended them leave before the cycle.
    std::vector<size_t> active;  // seats taking part in this cycle
    for (size_t s = 0; s < seats.size(); ++s) {
      if (seats[s].running == nullptr) continue;
      if (seats[s].running->BeginCycle()) {
        active.push_back(s);
      } else {
        leave(s, absl::OkStatus());
      }
    }
    if (active.empty()) {
      if (next < requests.size()) continue;  // seats freed: refill them
      break;
    }
    ++stats.cycles;
    ++stats.batch_histogram[active.size()];
    BatchCycle& logged = stats.cycle_log.emplace_back();
    logged.requests = static_cast<int64_t>(active.size());
    const std::optional<int64_t> scheduled =
        options.k_schedule.empty() ? std::nullopt
                                   : std::optional<int64_t>(ScheduledK(options.k_schedule, static_cast<int64_t>(active.size())));

    // Drafts: chains (batched where the drafters batch) and each tree request's own tree.
    std::vector<size_t> to_verify;               // seats whose block is verified below
    std::vector<std::vector<int32_t>> blocks;    // [to_verify] verify blocks
    std::vector<std::vector<int32_t>> parents;   // [to_verify] a tree block's parents (empty: a chain)
    double t = clock.Seconds();
    double tree_seconds = 0;
    std::vector<std::pair<size_t, int64_t>> together;  // (seat, k) drafted by options.drafter at once
    const std::map<size_t, int64_t> lengths = DraftLengths(seats, active, scheduled, controller.get());
    int64_t depth = 0;  // the deepest draft of the cycle
    for (size_t s : active) {
      Request& request = *seats[s].running;
      if (request.tree()) {
        const double tree_start = clock.Seconds();
        std::vector<int32_t> tree_parents;
        absl::StatusOr<std::vector<int32_t>> block = request.DraftTree(&tree_parents);
        tree_seconds += since(tree_start);
        if (!block.ok()) {
          leave(s, block.status());
          continue;
        }
        to_verify.push_back(s);
        blocks.push_back(std::move(*block));
        parents.push_back(std::move(tree_parents));
        continue;
      }
      const int64_t k = lengths.at(s);
      depth = std::max(depth, k);
      logged.draft_lengths.push_back(k);
      Drafter* drafter = slots[s].drafter;
      if (options.drafter != nullptr && drafter != nullptr && k > 0 && options.drafter->CanBatch(*drafter)) {
        together.push_back({s, k});
        continue;
      }
      absl::StatusOr<std::vector<int32_t>> block = request.Draft(k);
      if (!block.ok()) {
        leave(s, block.status());
        continue;
      }
      to_verify.push_back(s);
      blocks.push_back(std::move(*block));
      parents.emplace_back();
    }
    if (!together.empty()) {  // one batched Propose for the drafters that batch
      std::vector<Drafter*> drafters;
      std::vector<std::span<const int32_t>> sequences;
      std::vector<int64_t> ks;
      std::vector<DraftSampling> samplings;
      for (const auto& [s, k] : together) {
        drafters.push_back(slots[s].drafter);
        sequences.push_back(seats[s].running->sequence());
        ks.push_back(k);
        samplings.push_back(seats[s].running->context().draft_sampling());
      }
      const double propose_start = clock.Seconds();
      std::vector<absl::StatusOr<Draft>> drafts = options.drafter->ProposeBatch(drafters, sequences, ks, samplings);
      const double seconds = since(propose_start);
      ++stats.batched_drafts;
      for (size_t i = 0; i < together.size(); ++i) {
        const auto [s, k] = together[i];
        if (!drafts[i].ok()) {
          leave(s, drafts[i].status());
          continue;
        }
        to_verify.push_back(s);
        blocks.push_back(seats[s].running->SetDraft(std::move(*drafts[i]), k, seconds));
        parents.emplace_back();
      }
    }
    const double draft_phase_seconds = since(t) - tree_seconds;
    stats.draft_seconds += draft_phase_seconds;
    stats.tree_draft_seconds += tree_seconds;
    int64_t cycle_rows = 0;
    for (const std::vector<int32_t>& block : blocks) cycle_rows += static_cast<int64_t>(block.size());
    logged.verify_rows = cycle_rows;
    logged.draft_seconds = draft_phase_seconds;

    // One forward for the blocks the verifier can batch; the rest (and a batch that fails, so that
    // its error lands on the request at fault) verify alone.
    t = clock.Seconds();
    std::vector<size_t> batched, alone;  // indices into to_verify
    for (size_t i = 0; i < to_verify.size(); ++i) {
      const Request& request = *seats[to_verify[i]].running;
      const bool joins = options.verifier != nullptr && !request.context().device_sampling() &&
                         (parents[i].empty() ? options.verifier->CanBatch(request.target())
                                             : options.verifier->CanBatchTree(request.target()));
      (joins ? batched : alone).push_back(i);
    }
    std::vector<absl::Status> verify_status(to_verify.size());
    if (!batched.empty()) {
      std::vector<Target*> targets;
      std::vector<std::vector<int32_t>> batch_blocks, batch_parents;
      for (size_t i : batched) {
        targets.push_back(&seats[to_verify[i]].running->target());
        batch_blocks.push_back(blocks[i]);
        batch_parents.push_back(parents[i]);
      }
      const double forward_start = clock.Seconds();
      absl::StatusOr<BatchVerification> verified =
          options.verifier->VerifyBatchWithTrees(targets, batch_blocks, batch_parents);
      const double seconds = since(forward_start);
      if (verified.ok() && verified->steps.size() != batched.size()) {
        verified = absl::InternalError(absl::StrCat("the batch verifier returned ", verified->steps.size(),
                                                    " results for ", batched.size(), " blocks"));
        for (size_t i : batched) verify_status[i] = verified.status();
      } else if (verified.ok()) {
        ++stats.forwards;
        ++stats.batched_forwards;
        stats.verify_rows += verified->rows;
        stats.max_rows = std::max(stats.max_rows, verified->rows);
        stats.experts_read += verified->experts_read;
        stats.expert_choices += verified->expert_choices;
        logged.experts_read += verified->experts_read;
        for (size_t j = 0; j < batched.size(); ++j) {
          verify_status[batched[j]] =
              seats[to_verify[batched[j]]].running->SetVerified(std::move(verified->steps[j]), seconds);
        }
      } else {  // every target is as it was: verify each alone
        alone.insert(alone.end(), batched.begin(), batched.end());
      }
    }
    for (size_t i : alone) {
      verify_status[i] = seats[to_verify[i]].running->Verify();
      ++stats.forwards;
      const int64_t rows = static_cast<int64_t>(blocks[i].size());
      stats.verify_rows += rows;
      stats.max_rows = std::max(stats.max_rows, rows);
    }
    const double cycle_verify_seconds = since(t);
    stats.verify_seconds += cycle_verify_seconds;
    logged.verify_seconds = cycle_verify_seconds;

    // Acceptance, commit and rollback, per request.
    t = clock.Seconds();
    int64_t extending = 0;
    double extend_seconds = 0;   // the drafting requests' extends, wherever they ran
    double catch_up_seconds = 0; // the part of them that ran in this cycle's draft phase
    for (size_t i = 0; i < to_verify.size(); ++i) {
      const size_t s = to_verify[i];
      absl::Status status = verify_status[i];
      if (status.ok()) status = seats[s].running->EndCycle();
      if (status.ok() && !seats[s].running->last_cycle().tree) catch_up_seconds += seats[s].running->last_cycle().catch_up_seconds;
      if (status.ok() && controller) {
        const CycleRecord& cycle = seats[s].running->last_cycle();
        if (seats[s].running->adaptive()) controller->RecordAcceptance(seats[s].request, cycle.drafted, cycle.accepted);
        if (cycle.drafted > 0 && !cycle.tree) {  // the controller prices chain cycles
          ++extending;
          extend_seconds += cycle.catch_up_seconds + cycle.extend_seconds;
        }
      }
      if (!status.ok() || seats[s].running->done()) leave(s, status);  // its slot is free for the next cycle
    }
    stats.accept_commit_seconds += since(t);
    stats.draft_extend_seconds += catch_up_seconds;
    if (controller) {
      controller->RecordCycle(cycle_rows, cycle_verify_seconds, depth, std::max(0.0, draft_phase_seconds - catch_up_seconds),
                              extending, extend_seconds);
    }
  }
  stats.total_seconds = since(start);
  return out;
}

}  // namespace mtpspec
