#include "spec/batch.h"

#include <algorithm>
#include <set>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "spec/batch_loop.h"

namespace mtpspec {
namespace {

// GenerateBatch's results: each request's status, result, slot and times, by its queue index.
class BatchResultRecorder : public BatchObserver {
 public:
  BatchResultRecorder(BatchResult& out, double start) : out_(out), start_(start) {}
  void OnAdmit(int64_t id, int64_t seat, double start, double) override {
    out_.requests[id].slot = seat;
    out_.requests[id].queued_seconds = start - start_;
  }
  void OnLeave(int64_t id, const absl::Status& status, GenerateResult result, double end) override {
    BatchRequestResult& r = out_.requests[id];
    r.status = status;
    r.result = std::move(result);
    r.latency_seconds = end - start_;
  }

 private:
  BatchResult& out_;
  double start_;
};

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
  int64_t adaptive_k_max = 0;  // the k = auto requests' largest k, for their shared controller
  for (const BatchRequest& r : requests) {
    if (r.options.adaptive_k) adaptive_k_max = std::max<int64_t>(adaptive_k_max, std::max<int64_t>(r.options.k, 1));
  }
  const Clock& clock = options.clock != nullptr ? *options.clock : SteadyClock();
  const double start = clock.Seconds();
  BatchResult out;
  out.requests.resize(requests.size());
  BatchStatsRecorder stats(static_cast<int64_t>(slots.size()), start);
  BatchResultRecorder results(out, start);
  {
    BatchLoop loop(slots, options, adaptive_k_max, {&stats, &results});
    size_t next = 0;  // the queue's next request
    while (true) {
      while (next < requests.size() && loop.Admit(static_cast<int64_t>(next), requests[next])) ++next;
      if (!loop.Cycle() && next == requests.size()) break;
    }
  }
  out.stats = stats.Stats(clock.Seconds());
  return out;
}

}  // namespace mtpspec
