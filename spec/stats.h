// Speculative-decoding statistics, per request and aggregated. Metric names follow vLLM where it
// has one (num_drafts, num_draft_tokens, num_accepted_tokens, mean_acceptance_length,
// per-position acceptance).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"

namespace mtpspec {

struct SpecStats {
  std::string drafter;
  std::string accept_rule;
  bool lossy = false;
  bool synthetic = false;
  bool sampled_on_device = false;  // the target drew the tokens where its logits live (only ids crossed)
  bool adaptive_k = false;         // k was chosen each cycle by an adaptive-k controller

  int64_t prompt_tokens = 0;
  int64_t generated_tokens = 0;
  int64_t verify_steps = 0;         // target forwards after the prefill (plain steps included)
  int64_t num_drafts = 0;           // verify steps that carried at least one draft
  int64_t num_draft_tokens = 0;
  int64_t num_accepted_tokens = 0;
  std::vector<int64_t> drafted_per_pos;   // [k_max] steps whose draft had a position i
  std::vector<int64_t> reached_per_pos;   // [k_max] … and all positions before i accepted
  std::vector<int64_t> accepted_per_pos;  // [k_max] … and position i accepted
  std::vector<int64_t> accepted_histogram;  // [k_max + 1] verify steps (with drafts) by accepted count
  // [steps with drafts] each such verify step's draft tokens (a tree's nodes) and accepted drafts, in
  // order (vLLM's per_step_drafted / per_step_accepted).
  std::vector<int64_t> step_drafted, step_accepted;
  std::vector<int64_t> k_decisions;         // [k_max + 1] how often each k was used
  std::vector<int64_t> probe_decisions;     // [k_max + 1] … of which adaptive-k exploration probes
  // [k_max + 1] seconds of the steps by drafted length k: the target's verify forward, and the
  // whole cycle (draft with any catch-up, verify, sampling, commit, the drafter's extend). With
  // k_decisions they give each length's mean cost, e.g. whether --k auto's plain steps cost what
  // --draft none's do.
  std::vector<double> verify_seconds_by_k;
  std::vector<double> cycle_seconds_by_k;
  // Tree drafting: the shape (core/draft_tree.h, e.g. "3,2,1"; empty for chains). The per-position
  // arrays then count depths (position i = depth i + 1), num_draft_tokens counts the tree nodes
  // verified, and k_decisions / the seconds by k are indexed by node count.
  std::string tree;
  std::vector<int64_t> accepted_per_rank;  // [max rank + 1] accepted nodes by rank among their siblings
  // [depth][rank] accepted nodes by depth (0: the root's children) and sibling rank; with
  // reached_per_pos it gives each (depth, rank)'s conditional acceptance.
  std::vector<std::vector<int64_t>> accepted_per_depth_rank;
  // Requests whose drafter left the prompt for a later Propose (adaptive k expected plain decoding;
  // AdaptiveK::DeferPrompt): their draft_prefill is ~0, and any catch-up counts under extend.
  int64_t prompts_deferred = 0;

  // prefill includes the drafter's work on the prompt (draft_prefill, e.g. the MTP cache extend);
  // draft is Propose without catch-up; extend is the drafter's extend of committed rows after the
  // prompt (at Observe, or caught up inside a Propose after plain steps); other includes extend.
  double prefill_seconds = 0, draft_seconds = 0, verify_seconds = 0, sample_seconds = 0, other_seconds = 0;
  double draft_prefill_seconds = 0, extend_seconds = 0;
  double total_seconds = 0;

  // Sizes the per-position arrays for drafts of up to k_max tokens (Generate calls it with the
  // request's k_max, so they have the documented lengths even when no step drafted k_max).
  void SizeFor(int64_t k_max);
  void RecordStep(int64_t drafted, int64_t accepted);
  // A tree verify of `nodes` drafts down to `depth`, `accepted` of them on the path kept, with their
  // sibling ranks.
  void RecordTreeStep(int64_t nodes, int64_t depth, int64_t accepted, const std::vector<int64_t>& ranks);
  void RecordProbe(int64_t k);  // the step just recorded was an adaptive-k probe of length k
  void RecordStepSeconds(int64_t drafted, double verify_seconds, double cycle_seconds);
  void Merge(const SpecStats& other);

  // 1 + accepted / num_drafts (bonus token included), the usual "AL".
  double mean_acceptance_length() const;
  double draft_acceptance_rate() const;
  // Unconditional: accepted_i / num_drafts (vLLM's per-position rate). Conditional:
  // accepted_i / reached_i.
  std::vector<double> per_position_acceptance() const;
  std::vector<double> conditional_acceptance() const;
  double tokens_per_second() const;

  nlohmann::json ToJson() const;
  // One screen of text.
  std::string Summary() const;
};

}  // namespace mtpspec
