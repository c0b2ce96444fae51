#include "spec/stats.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace mtpspec {
namespace {

template <typename T>
void Grow(std::vector<T>& v, size_t n) {
  if (v.size() < n) v.resize(n, T{0});
}

template <typename T>
void AddInto(std::vector<T>& a, const std::vector<T>& b) {
  Grow(a, b.size());
  for (size_t i = 0; i < b.size(); ++i) a[i] += b[i];
}

}  // namespace

void SpecStats::SizeFor(int64_t k_max) {
  const size_t k = static_cast<size_t>(std::max<int64_t>(k_max, 0));
  for (auto* v : {&drafted_per_pos, &reached_per_pos, &accepted_per_pos}) Grow(*v, k);
  for (auto* v : {&accepted_histogram, &k_decisions, &probe_decisions}) Grow(*v, k + 1);
  Grow(verify_seconds_by_k, k + 1);
  Grow(cycle_seconds_by_k, k + 1);
}

void SpecStats::RecordStep(int64_t drafted, int64_t accepted) {
  ++verify_steps;
  Grow(k_decisions, drafted + 1);
  ++k_decisions[drafted];
  if (drafted == 0) return;
  ++num_drafts;
  num_draft_tokens += drafted;
  num_accepted_tokens += accepted;
  Grow(drafted_per_pos, drafted);
  Grow(reached_per_pos, drafted);
  Grow(accepted_per_pos, drafted);
  Grow(accepted_histogram, drafted + 1);
  for (int64_t i = 0; i < drafted; ++i) {
    ++drafted_per_pos[i];
    if (i <= accepted) ++reached_per_pos[i];
    if (i < accepted) ++accepted_per_pos[i];
  }
  ++accepted_histogram[accepted];
  step_drafted.push_back(drafted);
  step_accepted.push_back(accepted);
}

void SpecStats::RecordTreeStep(int64_t nodes, int64_t depth, int64_t accepted, const std::vector<int64_t>& ranks) {
  ++verify_steps;
  Grow(k_decisions, nodes + 1);
  ++k_decisions[nodes];
  if (nodes == 0) return;
  ++num_drafts;
  num_draft_tokens += nodes;
  num_accepted_tokens += accepted;
  for (auto* v : {&drafted_per_pos, &reached_per_pos, &accepted_per_pos}) Grow(*v, depth);
  Grow(accepted_histogram, depth + 1);
  for (int64_t i = 0; i < depth; ++i) {
    ++drafted_per_pos[i];
    if (i <= accepted) ++reached_per_pos[i];
    if (i < accepted) ++accepted_per_pos[i];
  }
  ++accepted_histogram[accepted];
  step_drafted.push_back(nodes);
  step_accepted.push_back(accepted);
  if (accepted_per_depth_rank.size() < ranks.size()) accepted_per_depth_rank.resize(ranks.size());
  for (size_t depth = 0; depth < ranks.size(); ++depth) {
    const int64_t rank = ranks[depth];
    Grow(accepted_per_rank, rank + 1);
    ++accepted_per_rank[rank];
    Grow(accepted_per_depth_rank[depth], rank + 1);
    ++accepted_per_depth_rank[depth][rank];
  }
}

void SpecStats::RecordProbe(int64_t k) {
  Grow(probe_decisions, k + 1);
  ++probe_decisions[k];
}

void SpecStats::RecordStepSeconds(int64_t drafted, double verify, double cycle) {
  Grow(verify_seconds_by_k, drafted + 1);
  Grow(cycle_seconds_by_k, drafted + 1);
  verify_seconds_by_k[drafted] += verify;
  cycle_seconds_by_k[drafted] += cycle;
}

void SpecStats::Merge(const SpecStats& o) {
  prompt_tokens += o.prompt_tokens;
  generated_tokens += o.generated_tokens;
  verify_steps += o.verify_steps;
  num_drafts += o.num_drafts;
  num_draft_tokens += o.num_draft_tokens;
  num_accepted_tokens += o.num_accepted_tokens;
  AddInto(drafted_per_pos, o.drafted_per_pos);
  AddInto(reached_per_pos, o.reached_per_pos);
  AddInto(accepted_per_pos, o.accepted_per_pos);
  AddInto(accepted_histogram, o.accepted_histogram);
  step_drafted.insert(step_drafted.end(), o.step_drafted.begin(), o.step_drafted.end());
  step_accepted.insert(step_accepted.end(), o.step_accepted.begin(), o.step_accepted.end());
  AddInto(k_decisions, o.k_decisions);
  AddInto(probe_decisions, o.probe_decisions);
  AddInto(verify_seconds_by_k, o.verify_seconds_by_k);
  AddInto(cycle_seconds_by_k, o.cycle_seconds_by_k);
  AddInto(accepted_per_rank, o.accepted_per_rank);
  if (accepted_per_depth_rank.size() < o.accepted_per_depth_rank.size()) {
    accepted_per_depth_rank.resize(o.accepted_per_depth_rank.size());
  }
  for (size_t depth = 0; depth < o.accepted_per_depth_rank.size(); ++depth) {
    AddInto(accepted_per_depth_rank[depth], o.accepted_per_depth_rank[depth]);
  }
  if (tree.empty()) tree = o.tree;
  prompts_deferred += o.prompts_deferred;
  prefill_seconds += o.prefill_seconds;
  draft_seconds += o.draft_seconds;
  verify_seconds += o.verify_seconds;
  sample_seconds += o.sample_seconds;
  other_seconds += o.other_seconds;
  draft_prefill_seconds += o.draft_prefill_seconds;
  extend_seconds += o.extend_seconds;
  total_seconds += o.total_seconds;
  if (drafter.empty()) drafter = o.drafter;
  if (accept_rule.empty()) accept_rule = o.accept_rule;
  lossy = lossy || o.lossy;
  synthetic = synthetic || o.synthetic;
  sampled_on_device = sampled_on_device || o.sampled_on_device;
  adaptive_k = adaptive_k || o.adaptive_k;
}

double SpecStats::mean_acceptance_length() const {
  return num_drafts == 0 ? 1.0 : 1.0 + static_cast<double>(num_accepted_tokens) / num_drafts;
}

double SpecStats::draft_acceptance_rate() const {
  return num_draft_tokens == 0 ? 0.0 : static_cast<double>(num_accepted_tokens) / num_draft_tokens;
}

std::vector<double> SpecStats::per_position_acceptance() const {
  std::vector<double> out;
  for (int64_t a : accepted_per_pos) out.push_back(num_drafts ? static_cast<double>(a) / num_drafts : 0.0);
  return out;
}

std::vector<double> SpecStats::conditional_acceptance() const {
  std::vector<double> out;
  for (size_t i = 0; i < accepted_per_pos.size(); ++i) {
    out.push_back(reached_per_pos[i] ? static_cast<double>(accepted_per_pos[i]) / reached_per_pos[i] : 0.0);
  }
  return out;
}

double SpecStats::tokens_per_second() const {
  const double decode = total_seconds - prefill_seconds;
  return decode > 0 ? generated_tokens / decode : 0.0;
}

nlohmann::json SpecStats::ToJson() const {
  return nlohmann::json{
      {"drafter", drafter},
      {"accept_rule", accept_rule},
      {"lossy", lossy},
      {"synthetic_acceptance", synthetic},
      {"sampled_on_device", sampled_on_device},
      {"adaptive_k", adaptive_k},
      {"prompt_tokens", prompt_tokens},
      {"generated_tokens", generated_tokens},
      {"verify_steps", verify_steps},
      {"num_drafts", num_drafts},
      {"num_draft_tokens", num_draft_tokens},
      {"num_accepted_tokens", num_accepted_tokens},
      {"mean_acceptance_length", mean_acceptance_length()},
      {"draft_acceptance_rate", draft_acceptance_rate()},
      {"num_accepted_tokens_per_pos", accepted_per_pos},
      {"num_drafted_per_pos", drafted_per_pos},
      {"num_reached_per_pos", reached_per_pos},
      {"per_position_acceptance_rate", per_position_acceptance()},
      {"conditional_acceptance_rate", conditional_acceptance()},
      {"acceptance_histogram", accepted_histogram},
      {"k_decisions", k_decisions},
      {"probe_decisions", probe_decisions},
      {"verify_seconds_by_k", verify_seconds_by_k},
      {"cycle_seconds_by_k", cycle_seconds_by_k},
      {"prompts_deferred", prompts_deferred},
      {"tree", tree},
      {"num_accepted_tokens_per_sibling_rank", accepted_per_rank},
      {"num_accepted_tokens_per_depth_and_sibling_rank", accepted_per_depth_rank},
      {"draft_tokens_per_accepted_token",
       num_accepted_tokens > 0 ? static_cast<double>(num_draft_tokens) / static_cast<double>(num_accepted_tokens) : 0.0},
      {"time_seconds",
       {{"prefill", prefill_seconds},
        {"draft", draft_seconds},
        {"verify", verify_seconds},
        {"sampling", sample_seconds},
        {"other", other_seconds},
        {"draft_prefill", draft_prefill_seconds},
        {"extend", extend_seconds},
        {"total", total_seconds}}},
      {"tokens_per_second", tokens_per_second()},
  };
}

std::string SpecStats::Summary() const {
  std::string s;
  absl::StrAppendFormat(&s, "drafter %s, accept %s%s%s%s\n", drafter, accept_rule, lossy ? " (LOSSY)" : "",
                        synthetic ? " (SYNTHETIC acceptance, benchmark only)" : "",
                        sampled_on_device ? ", sampled on the device" : "");
  absl::StrAppendFormat(&s, "tokens: prompt %d, generated %d; verify steps %d (%d with drafts)\n", prompt_tokens,
                        generated_tokens, verify_steps, num_drafts);
  absl::StrAppendFormat(&s, "drafted %d, accepted %d (%.1f%%); mean acceptance length %.3f\n", num_draft_tokens,
                        num_accepted_tokens, 100 * draft_acceptance_rate(), mean_acceptance_length());
  const auto uncond = per_position_acceptance(), cond = conditional_acceptance();
  if (!uncond.empty()) {
    s += "per position   ";
    for (size_t i = 0; i < uncond.size(); ++i) absl::StrAppendFormat(&s, " %6.3f", uncond[i]);
    s += "\nconditional    ";
    for (size_t i = 0; i < cond.size(); ++i) absl::StrAppendFormat(&s, " %6.3f", cond[i]);
    s += "\nhistogram      ";
    for (size_t i = 0; i < accepted_histogram.size(); ++i) absl::StrAppendFormat(&s, " %d:%d", i, accepted_histogram[i]);
    s += "\n";
  }
  if (!tree.empty()) {
    absl::StrAppendFormat(&s, "tree %s: per position = per depth; accepted by sibling rank", tree);
    for (size_t r = 0; r < accepted_per_rank.size(); ++r) absl::StrAppendFormat(&s, " %d:%d", r, accepted_per_rank[r]);
    absl::StrAppendFormat(&s, "; %.2f nodes verified per accepted token\n",
                          num_accepted_tokens > 0 ? static_cast<double>(num_draft_tokens) / num_accepted_tokens : 0.0);
  }
  if (adaptive_k) {
    // The controller's decisions: cycles by draft length, of which probes, and the prompts it let the
    // drafter skip because it expected plain decoding (spec/adaptive_k.h).
    s += "adaptive k: cycles by k";
    for (size_t k = 0; k < k_decisions.size(); ++k) absl::StrAppendFormat(&s, " %d:%d", k, k_decisions[k]);
    int64_t probes = 0;
    for (int64_t n : probe_decisions) probes += n;
    absl::StrAppendFormat(&s, "; probes %d; prompts deferred %d", probes, prompts_deferred);
    if (num_drafts == 0 && probes == 0) s += " (no probe: too short for the exploration budget, or drafting did not pay)";
    s += "\n";
  }
  absl::StrAppendFormat(&s, "time: prefill %.3fs, draft %.3fs, verify %.3fs, sampling %.3fs, other %.3fs; %.1f tok/s\n",
                        prefill_seconds, draft_seconds, verify_seconds, sample_seconds, other_seconds,
                        tokens_per_second());
  return s;
}

}  // namespace mtpspec
