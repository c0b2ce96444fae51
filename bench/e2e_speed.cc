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

void Accumulate(const SpeedResult& run, SpeedResult* total) {
  total->label = run.label;
  total->tokens += run.tokens;
  total->seconds += run.seconds;
  total->total_seconds += run.total_seconds;
  total->tokens_per_second = total->seconds > 0 ? static_cast<double>(total->tokens) / total->seconds : 0.0;
  total->run_tokens_per_second.push_back(run.tokens_per_second);
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
          {"probe_decisions", r.stats.probe_decisions},
          {"prompts_deferred", r.stats.prompts_deferred},
          {"verify_seconds_by_k", r.stats.verify_seconds_by_k},
          {"cycle_seconds_by_k", r.stats.cycle_seconds_by_k},
          {"extend_seconds", r.stats.extend_seconds},
          {"draft_prefill_seconds", r.stats.draft_prefill_seconds},
          {"synthetic_acceptance", r.stats.synthetic},
          {"run_tokens_per_second", r.run_tokens_per_second}};
}

}  // namespace mtpspec::bench
