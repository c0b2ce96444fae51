#include "bench/e2e_speed.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "bench/run_info.h"

namespace mtpspec::bench {

absl::StatusOr<SpeedResult> TimedGenerate(Target& target, Drafter* drafter, std::span<const int32_t> prompt,
                                          GenerateOptions options, const std::string& label) {
  std::vector<std::pair<double, int64_t>> marks;  // (time, tokens committed in that batch)
  options.on_tokens = [&marks](std::span<const int32_t> batch) {
    marks.emplace_back(NowSeconds(), static_cast<int64_t>(batch.size()));
    return true;
  };
  const double start = NowSeconds();
  ASSIGN_OR_RETURN(GenerateResult result, Generate(target, drafter, prompt, options));
  SpeedResult r;
  r.label = label;
  r.total_seconds = NowSeconds() - start;
  // marks[0]: the prefill's token; marks[1]: the end of the first cycle. Count from there.
  if (marks.size() >= 3) {
    for (size_t i = 2; i < marks.size(); ++i) r.tokens += marks[i].second;
    r.seconds = marks.back().first - marks[1].first;
  }
  r.tokens_per_second = r.seconds > 0 ? static_cast<double>(r.tokens) / r.seconds : 0.0;
  r.stats = std::move(result.stats);
  return r;
}

absl::Status PromptPrefillDrafter::Observe(std::span<const int32_t> sequence, int64_t first_position, int64_t rows,
                                           const TargetStep& step) {
  RETURN_IF_ERROR(inner_->Observe(sequence, first_position, rows, step));
  if (primed_) return absl::OkStatus();
  primed_ = true;
  const double start = NowSeconds();
  ASSIGN_OR_RETURN(stored_, inner_->Propose(sequence, k_max_, sampling_));
  prompt_seconds_ = NowSeconds() - start;
  has_stored_ = true;
  return absl::OkStatus();
}

absl::StatusOr<Draft> PromptPrefillDrafter::Propose(std::span<const int32_t> sequence, int64_t k,
                                                    const DraftSampling& sampling) {
  if (!has_stored_) return inner_->Propose(sequence, k, sampling);
  has_stored_ = false;
  if (sampling.sample != sampling_.sample || sampling.sampling.temperature != sampling_.sampling.temperature ||
      sampling.sampling.seed != sampling_.sampling.seed) {
    return absl::InternalError("PromptPrefillDrafter: Propose called with other draft sampling than configured");
  }
  Draft out = std::move(stored_);
  if (static_cast<int64_t>(out.tokens.size()) > k) out.tokens.resize(std::max<int64_t>(k, 0));
  if (static_cast<int64_t>(out.probs.size()) > k) out.probs.resize(std::max<int64_t>(k, 0));
  return out;
}

void PromptPrefillDrafter::Reset() {
  inner_->Reset();
  primed_ = false;
  has_stored_ = false;
  stored_ = Draft();
  prompt_seconds_ = 0;
}

void Accumulate(const SpeedResult& run, SpeedResult* total) {
  total->label = run.label;
  total->tokens += run.tokens;
  total->seconds += run.seconds;
  total->total_seconds += run.total_seconds;
  total->tokens_per_second = total->seconds > 0 ? static_cast<double>(total->tokens) / total->seconds : 0.0;
  if (total->stats.drafter.empty()) {
    total->stats = run.stats;
  } else {
    total->stats.Merge(run.stats);
  }
}

nlohmann::json ToJson(const SpeedResult& r) {
  nlohmann::json k_used = nlohmann::json::array();
  for (size_t k = 0; k < r.stats.k_decisions.size(); ++k) k_used.push_back(r.stats.k_decisions[k]);
  return {{"label", r.label},
          {"steady_tokens", r.tokens},
          {"steady_seconds", r.seconds},
          {"tokens_per_second", r.tokens_per_second},
          {"total_seconds", r.total_seconds},
          {"mean_acceptance_length", r.stats.num_drafts > 0 ? r.stats.mean_acceptance_length() : 1.0},
          {"conditional_acceptance", r.stats.conditional_acceptance()},
          {"num_drafts", r.stats.num_drafts},
          {"verify_steps", r.stats.verify_steps},
          {"draft_seconds", r.stats.draft_seconds},
          {"verify_seconds", r.stats.verify_seconds},
          {"k_decisions", k_used},
          {"synthetic_acceptance", r.stats.synthetic}};
}

}  // namespace mtpspec::bench
