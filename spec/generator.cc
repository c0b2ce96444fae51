#include "spec/generator.h"

#include <algorithm>
#include <chrono>
#include <optional>

#include "absl/strings/str_cat.h"
#include "spec/adaptive_k.h"

namespace mtpspec {
namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// A custom acceptance result must describe a prefix of the drafts plus one in-vocabulary token.
absl::Status CheckCustomAccept(const AcceptResult& r, std::span<const int32_t> drafts, int64_t vocab) {
  const int64_t k = static_cast<int64_t>(drafts.size());
  if (r.accepted < 0 || r.accepted > k) {
    return absl::InvalidArgumentError(
        absl::StrCat("custom acceptance: accepted = ", r.accepted, " is outside [0, ", k, "]"));
  }
  if (static_cast<int64_t>(r.tokens.size()) != r.accepted + 1) {
    return absl::InvalidArgumentError(absl::StrCat("custom acceptance: ", r.tokens.size(), " tokens for ", r.accepted,
                                                   " accepted drafts (expected accepted + 1)"));
  }
  for (int64_t i = 0; i < r.accepted; ++i) {
    if (r.tokens[i] != drafts[i]) {
      return absl::InvalidArgumentError(absl::StrCat("custom acceptance: token ", i, " differs from the draft"));
    }
  }
  if (r.tokens.back() < 0 || r.tokens.back() >= vocab) {
    return absl::InvalidArgumentError(absl::StrCat("custom acceptance: token ", r.tokens.back(),
                                                   " is outside the vocabulary [0, ", vocab, ")"));
  }
  return absl::OkStatus();
}

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
  const int64_t vocab = target.vocab_size();
  if (prompt.empty()) return absl::InvalidArgumentError("the prompt is empty");
  for (size_t i = 0; i < prompt.size(); ++i) {
    if (prompt[i] < 0 || prompt[i] >= vocab) {
      return absl::InvalidArgumentError(absl::StrCat("prompt token [", i, "] = ", prompt[i],
                                                     " is outside the vocabulary [0, ", vocab, ")"));
    }
  }
  if (static_cast<int64_t>(prompt.size()) >= target.capacity()) {
    return absl::InvalidArgumentError(absl::StrCat("the prompt (", prompt.size(), " tokens) does not fit the cache (",
                                                   target.capacity(), " positions, one is needed for decoding)"));
  }
  const int64_t k_max = drafter == nullptr ? 0 : options.k;
  const std::vector<int64_t> eos = target.eos_tokens();
  auto is_eos = [&](int32_t t) { return options.stop_at_eos && std::find(eos.begin(), eos.end(), t) != eos.end(); };

  target.Reset();
  if (drafter) drafter->Reset();
  GenerateResult result;
  SpecStats& stats = result.stats;
  stats.drafter = drafter ? drafter->name() : "none";
  stats.accept_rule = options.custom_accept ? "custom" : AcceptRuleName(options.accept.rule);
  stats.lossy = options.custom_accept || !IsLossless(options.accept.rule);
  stats.synthetic = options.accept.rule == AcceptRule::kSynthetic;
  stats.adaptive_k = options.adaptive_k;
  stats.prompt_tokens = static_cast<int64_t>(prompt.size());
  const Clock::time_point start = Clock::now();

  // A target whose logits live on a device draws the tokens there when the rule needs only the
  // sampler's draws (sampler-equality with argmax drafts): only ids cross to the host.
  const bool device_sampling = target.samples_on_device() && !options.custom_accept && !options.sample_drafts &&
                               options.accept.rule == AcceptRule::kSamplerEquality;
  stats.sampled_on_device = device_sampling;
  auto run = [&](std::span<const int32_t> tokens, bool all_logits) {
    return device_sampling ? target.RunKeepingLogits(tokens, all_logits) : target.Run(tokens, all_logits);
  };
  // The target's draws for the rows of the last run, row r at position first_position + r.
  auto device_draws = [&](int64_t rows, int64_t first_position) -> absl::StatusOr<std::vector<int32_t>> {
    ASSIGN_OR_RETURN(std::vector<int32_t> draws, target.SampleLastRun(options.accept.sampling, first_position));
    if (static_cast<int64_t>(draws.size()) != rows) {
      return absl::InternalError(absl::StrCat("the target's SampleLastRun drew ", draws.size(), " tokens for ", rows,
                                              " logits rows"));
    }
    for (int32_t id : draws) {
      if (id < 0 || id >= vocab) {
        return absl::InternalError(absl::StrCat("the target's SampleLastRun drew token ", id,
                                                ", outside the vocabulary [0, ", vocab, ")"));
      }
    }
    return draws;
  };

  std::vector<int32_t> sequence(prompt.begin(), prompt.end());
  // Prefill; the first new token comes from the last prompt row.
  Clock::time_point t = Clock::now();
  ASSIGN_OR_RETURN(TargetStep prefill, run(prompt, /*all_logits=*/false));
  stats.prefill_seconds = Since(t);
  if (options.max_new_tokens == 0) {
    result.stop_reason = "max_new_tokens";
    stats.total_seconds = Since(start);
    return result;
  }
  t = Clock::now();
  int32_t first = 0;
  if (device_sampling) {
    ASSIGN_OR_RETURN(std::vector<int32_t> draws, device_draws(1, static_cast<int64_t>(sequence.size())));
    first = draws[0];
  } else {
    first = SampleToken(prefill.logits.data<float>(), vocab, options.accept.sampling,
                        static_cast<int64_t>(sequence.size()));
  }
  stats.sample_seconds += Since(t);
  sequence.push_back(first);
  result.tokens.push_back(first);
  ++stats.generated_tokens;
  if (options.on_tokens && !options.on_tokens(std::span<const int32_t>(&first, 1))) result.stop_reason = "cancelled";
  if (is_eos(first)) result.stop_reason = "eos";
  // Tokens the request may still produce: its budget, and never past the cache.
  auto tokens_left = [&] {
    return std::min(options.max_new_tokens - static_cast<int64_t>(result.tokens.size()),
                    target.capacity() - (static_cast<int64_t>(sequence.size()) - 1));
  };
  std::optional<AdaptiveK> own_controller;  // a fresh one, unless the caller carries one across requests
  AdaptiveK* controller = options.adaptive_controller.get();
  if (controller == nullptr) {
    controller = &own_controller.emplace(std::max<int64_t>(k_max, 1));
  } else {
    controller->BeginRequest();
  }
  if (drafter) {  // the drafter's work on the prompt is part of the prefill
    // A carried controller that expects this request to decode plainly lets the drafter skip it.
    if (options.adaptive_k && controller->DeferPrompt(static_cast<int64_t>(prompt.size()), tokens_left())) {
      drafter->DeferPrompt();
      stats.prompts_deferred = 1;
    }
    t = Clock::now();
    RETURN_IF_ERROR(drafter->Observe(sequence, 0, static_cast<int64_t>(prompt.size()), prefill));
    stats.draft_prefill_seconds = Since(t);
    stats.prefill_seconds += stats.draft_prefill_seconds;
  }
  DraftSampling draft_sampling;
  draft_sampling.sample = options.sample_drafts;
  draft_sampling.sampling = options.accept.sampling;

  while (result.stop_reason.empty()) {
    const int64_t generated = static_cast<int64_t>(result.tokens.size());
    if (generated >= options.max_new_tokens) {
      result.stop_reason = "max_new_tokens";
      break;
    }
    const int64_t n = static_cast<int64_t>(sequence.size()) - 1;  // position of the pending token
    if (n >= target.capacity()) {
      result.stop_reason = "capacity";
      break;
    }
    const Clock::time_point cycle_start = Clock::now();
    double cycle_catch_up = 0;  // deferred work of earlier plain steps, not this cycle's cost
    // Never draft past the token budget or the cache.
    controller->SetTokensLeft(tokens_left());
    int64_t k = options.adaptive_k ? std::min(controller->Choose(), k_max) : k_max;
    const bool probe = options.adaptive_k && controller->last_was_probe();
    k = std::min({k, options.max_new_tokens - generated - 1, target.capacity() - n - 1});
    k = std::max<int64_t>(k, 0);

    Draft draft;
    if (k > 0) {
      t = Clock::now();
      ASSIGN_OR_RETURN(draft, drafter->Propose(sequence, k, draft_sampling));
      // A drafter may propose fewer tokens, never more: trim so budgets and statistics hold.
      if (static_cast<int64_t>(draft.tokens.size()) > k) draft.tokens.resize(k);
      if (static_cast<int64_t>(draft.probs.size()) > k) draft.probs.resize(k);
      const double catch_up = std::max(0.0, draft.catch_up_seconds);
      const double seconds = std::max(0.0, Since(t) - catch_up);
      stats.draft_seconds += seconds;
      stats.extend_seconds += catch_up;
      stats.other_seconds += catch_up;
      if (catch_up > 0) controller->RecordCatchUp(catch_up);
      cycle_catch_up = catch_up;
      if (!draft.tokens.empty()) controller->RecordDraftStep(seconds / static_cast<double>(draft.tokens.size()));
    }
    const int64_t drafted = static_cast<int64_t>(draft.tokens.size());
    std::vector<int32_t> block = {sequence.back()};
    block.insert(block.end(), draft.tokens.begin(), draft.tokens.end());

    t = Clock::now();
    ASSIGN_OR_RETURN(TargetStep step, run(block, /*all_logits=*/true));
    const double verify_seconds = Since(t);
    stats.verify_seconds += verify_seconds;

    t = Clock::now();
    VerifyBlock verify;
    verify.target_logits = device_sampling ? nullptr : step.logits.data<float>();
    verify.vocab = vocab;
    verify.drafts = draft.tokens;
    verify.draft_probs = options.sample_drafts ? &draft.probs : nullptr;
    verify.first_position = n + 1;
    AcceptResult accepted;
    if (device_sampling) {
      ASSIGN_OR_RETURN(std::vector<int32_t> draws, device_draws(drafted + 1, n + 1));
      ASSIGN_OR_RETURN(accepted, AcceptBySamples(draft.tokens, draws));
    } else if (options.custom_accept && drafted > 0) {
      ASSIGN_OR_RETURN(accepted, options.custom_accept(verify));
      RETURN_IF_ERROR(CheckCustomAccept(accepted, draft.tokens, vocab));
    } else {
      accepted = AcceptDrafts(verify, options.accept);
    }
    const double accept_seconds = Since(t);
    stats.sample_seconds += accept_seconds;
    stats.RecordStep(drafted, accepted.accepted);
    if (probe) stats.RecordProbe(drafted);
    // The controller's verify cost is the whole block: forward plus sampling of its k + 1 rows.
    controller->RecordVerify(drafted, accepted.accepted, verify_seconds + accept_seconds);

    // Commit the emitted tokens one by one; EOS and the budget can cut the block anywhere.
    t = Clock::now();
    int64_t committed = 0;
    for (int32_t token : accepted.tokens) {
      sequence.push_back(token);
      result.tokens.push_back(token);
      ++committed;
      if (is_eos(token)) {
        result.stop_reason = "eos";
        break;
      }
      if (static_cast<int64_t>(result.tokens.size()) >= options.max_new_tokens) {
        result.stop_reason = "max_new_tokens";
        break;
      }
    }
    stats.generated_tokens += committed;
    // Target rows n … n + committed − 1 are committed; later ones (rejected drafts) roll back.
    RETURN_IF_ERROR(target.Truncate(n + committed));
    if (options.on_tokens &&
        !options.on_tokens(std::span<const int32_t>(result.tokens.data() + result.tokens.size() - committed,
                                                    committed)) &&
        result.stop_reason.empty()) {
      result.stop_reason = "cancelled";
    }
    stats.other_seconds += Since(t);
    if (drafter && result.stop_reason.empty()) {
      t = Clock::now();
      RETURN_IF_ERROR(drafter->Observe(sequence, n, committed, step));
      const double extend = Since(t);
      stats.extend_seconds += extend;
      stats.other_seconds += extend;
      if (drafted > 0) controller->RecordExtend(extend);
    }
    const double cycle_seconds = Since(cycle_start);
    stats.RecordStepSeconds(drafted, verify_seconds, cycle_seconds);
    if (result.stop_reason.empty()) controller->RecordCycle(drafted, cycle_seconds - cycle_catch_up);
  }
  stats.total_seconds = Since(start);
  return result;
}

}  // namespace mtpspec
