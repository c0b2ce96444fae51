#include "spec/generator.h"

#include <algorithm>
#include <chrono>
#include <optional>

#include "absl/strings/str_cat.h"
#include "spec/loop.h"
#include "spec/observers.h"
#include "spec/tree_loop.h"

namespace mtpspec {
namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

absl::Status CheckRequest(const Target& target, std::span<const int32_t> prompt, const GenerateOptions& options) {
  const int64_t vocab = target.vocab_size();
  if (prompt.empty()) return absl::InvalidArgumentError("the prompt is empty");
  for (size_t i = 0; i < prompt.size(); ++i) {
    if (prompt[i] < 0 || prompt[i] >= vocab) {
      return absl::InvalidArgumentError(absl::StrCat("prompt token [", i, "] = ", prompt[i],
                                                     " is outside the vocabulary [0, ", vocab, ")"));
    }
  }
  for (const auto* list : {&options.stop_token_ids, options.eos_token_ids ? &*options.eos_token_ids : nullptr}) {
    if (list == nullptr) continue;
    const char* what = list == &options.stop_token_ids ? "stop_token_ids" : "eos_token_id";
    for (size_t i = 0; i < list->size(); ++i) {
      if ((*list)[i] < 0 || (*list)[i] >= vocab) {
        return absl::InvalidArgumentError(absl::StrCat(what, "[", i, "] = ", (*list)[i],
                                                       " is outside the vocabulary [0, ", vocab, ")"));
      }
    }
  }
  if (static_cast<int64_t>(prompt.size()) >= target.capacity()) {
    return absl::InvalidArgumentError(absl::StrCat("the prompt (", prompt.size(), " tokens) does not fit the cache (",
                                                   target.capacity(), " positions, one is needed for decoding)"));
  }
  return absl::OkStatus();
}

// The loop's observers: the statistics, the draft-length policy, and the caller's own.
class Observers {
 public:
  void Add(LoopObserver* observer) {
    if (observer != nullptr) all_.push_back(observer);
  }
  void OnPrefill(const PrefillRecord& record) const {
    for (LoopObserver* o : all_) o->OnPrefill(record);
  }
  void OnCycle(const CycleRecord& record) const {
    for (LoopObserver* o : all_) o->OnCycle(record);
  }

 private:
  std::vector<LoopObserver*> all_;
};

}  // namespace

absl::Status ValidateGenerateOptions(const GenerateOptions& o) {
  if (o.k < 0 || o.k > kMaxDraftTokens) {
    return absl::InvalidArgumentError(absl::StrCat("k must be in [0, ", kMaxDraftTokens, "], got ", o.k));
  }
  if (o.max_new_tokens < 0) {
    return absl::InvalidArgumentError(absl::StrCat("max_new_tokens must be >= 0, got ", o.max_new_tokens));
  }
  RETURN_IF_ERROR(ValidateSamplingParams(o.accept.sampling));
  if (o.accept.rule == AcceptRule::kRelaxed && (o.accept.relaxed_top_n < 1 || o.accept.relaxed_delta < 0)) {
    return absl::InvalidArgumentError("relaxed acceptance needs top_n >= 1 and delta >= 0");
  }
  for (double r : o.accept.synthetic_rates) {
    if (!(r >= 0.0 && r <= 1.0)) return absl::InvalidArgumentError("synthetic acceptance rates must be in [0, 1]");
  }
  if (!o.tree.empty()) {
    RETURN_IF_ERROR(ValidateTreeShape(o.tree, "tree"));
    if (o.custom_accept || !IsLossless(o.accept.rule)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tree drafting verifies with sampler-equality or rejection; accept = ",
          o.custom_accept ? "custom" : AcceptRuleName(o.accept.rule), " does not support trees"));
    }
    if (o.sample_drafts) return absl::InvalidArgumentError("tree drafting takes argmax drafts; sample_drafts must be off");
    if (o.adaptive_k) return absl::InvalidArgumentError("tree drafting has a fixed shape; adaptive k must be off");
  }
  if (o.adaptive_controller && !o.adaptive_k) {
    return absl::InvalidArgumentError("adaptive_controller is set but adaptive_k is false");
  }
  if (o.adaptive_controller && o.adaptive_controller->k_max() != std::max<int64_t>(o.k, 1)) {
    return absl::InvalidArgumentError(absl::StrCat("adaptive_controller was made for k_max = ",
                                                   o.adaptive_controller->k_max(), ", this request has k = ", o.k));
  }
  return absl::OkStatus();
}

absl::StatusOr<GenerateResult> Generate(Target& target, Drafter* drafter, std::span<const int32_t> prompt,
                                        const GenerateOptions& options) {
  RETURN_IF_ERROR(ValidateGenerateOptions(options));
  RETURN_IF_ERROR(CheckRequest(target, prompt, options));
  const bool tree = !options.tree.empty() && drafter != nullptr;
  if (tree && !drafter->can_branch()) {
    return absl::InvalidArgumentError(absl::StrCat("tree drafting needs a drafter that can branch (mtp on the CPU); the ",
                                                   drafter->name(), " drafter cannot"));
  }
  const int64_t k_max = drafter == nullptr ? 0 : (tree ? options.tree.depth() : options.k);
  target.Reset();
  if (drafter) drafter->Reset();
  const LoopContext context(target, drafter, options);

  GenerateResult result;
  SpecStats& stats = result.stats;
  stats.drafter = drafter ? drafter->name() : "none";
  stats.accept_rule = options.custom_accept ? "custom" : AcceptRuleName(options.accept.rule);
  stats.lossy = options.custom_accept || !IsLossless(options.accept.rule);
  stats.synthetic = options.accept.rule == AcceptRule::kSynthetic;
  stats.adaptive_k = options.adaptive_k;
  stats.sampled_on_device = context.device_sampling();
  stats.SizeFor(k_max);
  if (tree) stats.tree = options.tree.Name();
  StatsRecorder recorder(stats);
  std::optional<AdaptivePolicy> adaptive;  // a fixed-k run has no policy and never calls one
  if (options.adaptive_k) adaptive.emplace(k_max, options.adaptive_controller);
  DraftLengthPolicy* policy = adaptive ? &*adaptive : nullptr;
  Observers observers;
  observers.Add(&recorder);
  observers.Add(policy);
  observers.Add(options.observer);

  const Clock::time_point start = Clock::now();
  LoopState state;
  PrefillRecord prefill;
  RETURN_IF_ERROR(PrefillStep(context, prompt, policy, state, prefill));
  observers.OnPrefill(prefill);
  while (state.stop_reason.empty()) {
    const int64_t generated = static_cast<int64_t>(state.tokens.size());
    if (generated >= options.max_new_tokens) {
      state.stop_reason = "max_new_tokens";
      break;
    }
    const int64_t n = state.pending_position();
    if (n >= target.capacity()) {
      state.stop_reason = "capacity";
      break;
    }
    const Clock::time_point cycle_start = Clock::now();
    CycleRecord cycle;
    if (tree) {  // never past the token budget (depth) or the cache (nodes)
      const int64_t room = target.capacity() - n - 1;
      RETURN_IF_ERROR(TreeCycle(context, state, std::min(options.max_new_tokens - generated - 1, room), room, cycle));
      cycle.cycle_seconds = Since(cycle_start);
      observers.OnCycle(cycle);
      continue;
    }
    int64_t k = policy ? std::min(policy->Choose(state.TokensLeft(context), &cycle.probe), k_max) : k_max;
    // Never draft past the token budget or the cache.
    k = std::max<int64_t>(std::min({k, options.max_new_tokens - generated - 1, target.capacity() - n - 1}), 0);
    ASSIGN_OR_RETURN(const Draft draft, DraftStep(context, state, k, cycle));
    ASSIGN_OR_RETURN(const TargetStep verified, VerifyStep(context, state, draft, cycle));
    ASSIGN_OR_RETURN(const AcceptResult accepted, AcceptStep(context, state, draft, verified, cycle));
    RETURN_IF_ERROR(CommitStep(context, accepted, verified, state, cycle));
    cycle.cycle_seconds = Since(cycle_start);
    observers.OnCycle(cycle);
  }
  stats.total_seconds = Since(start);
  result.tokens = std::move(state.tokens);
  result.logprobs = std::move(state.logprobs);
  result.stop_reason = std::move(state.stop_reason);
  return result;
}

}  // namespace mtpspec
