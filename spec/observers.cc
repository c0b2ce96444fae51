#include "spec/observers.h"

#include <algorithm>

namespace mtpspec {

void StatsRecorder::OnPrefill(const PrefillRecord& record) {
  stats_.prompt_tokens = record.prompt_tokens;
  stats_.draft_prefill_seconds = record.drafter_seconds;
  stats_.prefill_seconds = record.target_seconds + record.drafter_seconds;
  stats_.sample_seconds += record.sample_seconds;
  if (record.sampled_first) ++stats_.generated_tokens;
  if (record.prompt_deferred) stats_.prompts_deferred = 1;
}

void StatsRecorder::OnCycle(const CycleRecord& record) {
  stats_.draft_seconds += record.draft_seconds;
  // A catch-up is deferred extend work; extend counts under other.
  stats_.extend_seconds += record.catch_up_seconds + record.extend_seconds;
  stats_.other_seconds += record.catch_up_seconds + record.commit_seconds + record.extend_seconds;
  stats_.verify_seconds += record.verify_seconds;
  stats_.sample_seconds += record.accept_seconds;
  if (record.tree) {
    stats_.RecordTreeStep(record.drafted, record.tree_depth, record.accepted, record.accepted_ranks);
  } else {
    stats_.RecordStep(record.drafted, record.accepted);
  }
  if (record.probe) stats_.RecordProbe(record.drafted);
  stats_.generated_tokens += record.committed;
  stats_.RecordStepSeconds(record.drafted, record.verify_seconds, record.cycle_seconds);
}

AdaptivePolicy::AdaptivePolicy(int64_t k_max, std::shared_ptr<AdaptiveK> carried) : carried_(std::move(carried)) {
  if (carried_) {
    controller_ = carried_.get();
    controller_->BeginRequest();
  } else {
    controller_ = &own_.emplace(std::max<int64_t>(k_max, 1));
  }
}

bool AdaptivePolicy::DeferPrompt(int64_t prompt_rows, int64_t tokens_left) {
  return controller_->DeferPrompt(prompt_rows, tokens_left);
}

int64_t AdaptivePolicy::Choose(int64_t tokens_left, bool* probe) {
  controller_->SetTokensLeft(tokens_left);
  const int64_t k = controller_->Choose();
  *probe = controller_->last_was_probe();
  return k;
}

void AdaptivePolicy::OnCycle(const CycleRecord& record) {
  if (record.catch_up_seconds > 0) controller_->RecordCatchUp(record.catch_up_seconds);
  if (record.drafted > 0) controller_->RecordDraftStep(record.draft_seconds / static_cast<double>(record.drafted));
  // The verify cost is the whole block: the forward plus sampling of its k + 1 rows.
  controller_->RecordVerify(record.drafted, record.accepted, record.verify_seconds + record.accept_seconds);
  if (record.observed && record.drafted > 0) controller_->RecordExtend(record.extend_seconds);
  // A cycle's cost without the catch-up, which belongs to the plain steps before it.
  if (!record.last) controller_->RecordCycle(record.drafted, record.cycle_seconds - record.catch_up_seconds);
}

}  // namespace mtpspec
