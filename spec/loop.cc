#include "spec/loop.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/dtype.h"
#include "core/status.h"
#include "spec/generator.h"

namespace mtpspec {
namespace {

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

// NaN or Inf in the target's logits would be sampled as if they were numbers (greedy picks id 0):
// stop instead, naming the position. logits: [R, V], the last R of the run's `rows` positions.
absl::Status CheckLogitsFinite(const Tensor& logits, int64_t first_position, int64_t rows) {
  if (logits.empty() || logits.dtype() != DType::kF32 || logits.view().ndim != 2) return absl::OkStatus();
  const int64_t R = logits.dim(0), V = logits.dim(1);
  const float* data = logits.data<float>();
  const int64_t at = FirstNonFinite(std::span<const float>(data, static_cast<size_t>(R * V)));
  if (at < 0) return absl::OkStatus();
  const int64_t row = at / V, id = at % V;
  return absl::DataLossError(absl::StrCat(
      "the target's logits are not finite at position ", first_position + rows - R + row, " (vocabulary id ", id,
      " is ", data[at], "): the checkpoint's weights or config give non-finite activations; "
      "`mtpspec info MODEL --check-weights` lists non-finite weights"));
}

// log softmax(logits)[token] over the raw logits ([V], temperature 1, no filtering), in double.
float TokenLogProb(const float* logits, int64_t vocab, int32_t token) {
  const float peak = *std::max_element(logits, logits + vocab);
  double sum = 0.0;
  for (int64_t i = 0; i < vocab; ++i) sum += std::exp(static_cast<double>(logits[i]) - peak);
  return static_cast<float>(static_cast<double>(logits[token]) - peak - std::log(sum));
}

}  // namespace

LoopContext::LoopContext(Target& target, Drafter* drafter, const GenerateOptions& options)
    : target_(target),
      drafter_(drafter),
      options_(options),
      clock_(options.clock != nullptr ? *options.clock : SteadyClock()),
      vocab_(target.vocab_size()),
      eos_(!options.stop_at_eos ? std::vector<int64_t>()
           : options.eos_token_ids ? *options.eos_token_ids
                                   : target.eos_tokens()),
      device_sampling_(target.samples_on_device() && !options.custom_accept && !options.sample_drafts &&
                       !options.logprobs &&
                       options.accept.rule == AcceptRule::kSamplerEquality) {
  draft_sampling_.sample = options.sample_drafts;
  draft_sampling_.sampling = options.accept.sampling;
}

std::string LoopContext::StopReasonOf(int32_t token) const {
  if (std::find(eos_.begin(), eos_.end(), token) != eos_.end()) return "eos";
  const std::vector<int64_t>& stops = options_.stop_token_ids;
  if (std::find(stops.begin(), stops.end(), token) != stops.end()) return "stop_token";
  return "";
}

absl::StatusOr<TargetStep> LoopContext::Run(std::span<const int32_t> tokens, bool all_logits) const {
  const int64_t first_position = target_.length();
  if (device_sampling_) return target_.RunKeepingLogits(tokens, all_logits);
  ASSIGN_OR_RETURN(TargetStep step, target_.Run(tokens, all_logits));
  RETURN_IF_ERROR(CheckLogitsFinite(step.logits, first_position, static_cast<int64_t>(tokens.size())));
  return step;
}

absl::Status LoopContext::CheckLogits(const Tensor& logits, int64_t first_position, int64_t rows) const {
  return CheckLogitsFinite(logits, first_position, rows);
}

absl::StatusOr<TargetStep> LoopContext::RunTree(std::span<const int32_t> tokens,
                                                std::span<const int32_t> parents) const {
  const int64_t first_position = target_.length();
  ASSIGN_OR_RETURN(TargetStep step, target_.RunTree(tokens, parents));
  // Rows are reported by index here: a node's position is first_position + its depth.
  RETURN_IF_ERROR(CheckLogitsFinite(step.logits, first_position, static_cast<int64_t>(tokens.size())));
  return step;
}

absl::StatusOr<std::vector<int32_t>> LoopContext::DeviceDraws(int64_t rows, int64_t first_position) const {
  ASSIGN_OR_RETURN(std::vector<int32_t> draws, target_.SampleLastRun(options_.accept.sampling, first_position));
  if (static_cast<int64_t>(draws.size()) != rows) {
    return absl::InternalError(absl::StrCat("the target's SampleLastRun drew ", draws.size(), " tokens for ", rows,
                                            " logits rows"));
  }
  for (int32_t id : draws) {
    if (id < 0 || id >= vocab_) {
      return absl::InternalError(absl::StrCat("the target's SampleLastRun drew token ", id,
                                              ", outside the vocabulary [0, ", vocab_, ")"));
    }
  }
  return draws;
}

int64_t LoopState::TokensLeft(const LoopContext& context) const {
  return std::min(context.options().max_new_tokens - static_cast<int64_t>(tokens.size()),
                  context.target().capacity() - pending_position());
}

absl::Status PrefillStep(const LoopContext& context, std::span<const int32_t> prompt, DraftLengthPolicy* policy,
                         LoopState& state, PrefillRecord& record) {
  const GenerateOptions& options = context.options();
  record.prompt_tokens = static_cast<int64_t>(prompt.size());
  state.sequence.assign(prompt.begin(), prompt.end());
  double t = context.Now();
  ASSIGN_OR_RETURN(TargetStep prefill, context.Run(prompt, /*all_logits=*/false));
  record.target_seconds = context.Now() - t;
  if (options.max_new_tokens == 0) {
    state.stop_reason = "max_new_tokens";
    return absl::OkStatus();
  }
  // The first new token comes from the last prompt row.
  t = context.Now();
  int32_t first = 0;
  const int64_t position = static_cast<int64_t>(prompt.size());
  if (context.device_sampling()) {
    ASSIGN_OR_RETURN(std::vector<int32_t> draws, context.DeviceDraws(1, position));
    first = draws[0];
  } else {
    first = SampleToken(prefill.logits.data<float>(), context.vocab(), options.accept.sampling, position);
  }
  if (options.logprobs) state.logprobs.push_back(TokenLogProb(prefill.logits.data<float>(), context.vocab(), first));
  record.sample_seconds = context.Now() - t;
  record.sampled_first = true;
  state.sequence.push_back(first);
  state.tokens.push_back(first);
  if (options.on_tokens && !options.on_tokens(std::span<const int32_t>(&first, 1))) state.stop_reason = "cancelled";
  if (std::string why = context.StopReasonOf(first); !why.empty()) state.stop_reason = std::move(why);

  Drafter* drafter = context.drafter();
  if (drafter == nullptr) return absl::OkStatus();
  // The drafter's work on the prompt is part of the prefill. A policy that expects this request to
  // decode plainly lets the drafter skip it.
  if (policy != nullptr && policy->DeferPrompt(record.prompt_tokens, state.TokensLeft(context))) {
    drafter->DeferPrompt();
    record.prompt_deferred = true;
  }
  t = context.Now();
  RETURN_IF_ERROR(drafter->Observe(state.sequence, 0, record.prompt_tokens, prefill));
  record.drafter_seconds = context.Now() - t;
  return absl::OkStatus();
}

absl::StatusOr<Draft> DraftStep(const LoopContext& context, const LoopState& state, int64_t k, CycleRecord& record) {
  Draft draft;
  if (k <= 0 || context.drafter() == nullptr) return draft;
  const double t = context.Now();
  ASSIGN_OR_RETURN(draft, context.drafter()->Propose(state.sequence, k, context.draft_sampling()));
  RecordDraft(draft, k, context.Now() - t, record);
  return draft;
}

void RecordDraft(Draft& draft, int64_t k, double seconds, CycleRecord& record) {
  // A drafter may propose fewer tokens, never more: trim so budgets and statistics hold.
  if (static_cast<int64_t>(draft.tokens.size()) > k) draft.tokens.resize(k);
  if (static_cast<int64_t>(draft.probs.size()) > k) draft.probs.resize(k);
  record.catch_up_seconds = std::max(0.0, draft.catch_up_seconds);
  record.draft_seconds = std::max(0.0, seconds - record.catch_up_seconds);
  record.drafted = static_cast<int64_t>(draft.tokens.size());
}

absl::StatusOr<TargetStep> VerifyStep(const LoopContext& context, const LoopState& state, const Draft& draft,
                                      CycleRecord& record) {
  std::vector<int32_t> block = {state.sequence.back()};  // [1 + k] at positions n … n + k
  block.insert(block.end(), draft.tokens.begin(), draft.tokens.end());
  const double t = context.Now();
  ASSIGN_OR_RETURN(TargetStep verified, context.Run(block, /*all_logits=*/true));
  record.verify_seconds = context.Now() - t;
  return verified;
}

absl::StatusOr<AcceptResult> AcceptStep(const LoopContext& context, const LoopState& state, const Draft& draft,
                                        const TargetStep& verified, CycleRecord& record) {
  const GenerateOptions& options = context.options();
  const double t = context.Now();
  const int64_t drafted = static_cast<int64_t>(draft.tokens.size());
  VerifyBlock block;
  block.target_logits = context.device_sampling() ? nullptr : verified.logits.data<float>();
  block.vocab = context.vocab();
  block.drafts = draft.tokens;
  block.draft_probs = options.sample_drafts ? &draft.probs : nullptr;
  block.first_position = state.pending_position() + 1;
  AcceptResult accepted;
  if (context.device_sampling()) {
    ASSIGN_OR_RETURN(std::vector<int32_t> draws, context.DeviceDraws(drafted + 1, block.first_position));
    ASSIGN_OR_RETURN(accepted, AcceptBySamples(draft.tokens, draws));
  } else if (options.custom_accept && drafted > 0) {
    ASSIGN_OR_RETURN(accepted, options.custom_accept(block));
    RETURN_IF_ERROR(CheckCustomAccept(accepted, draft.tokens, context.vocab()));
  } else {
    accepted = AcceptDrafts(block, options.accept);
  }
  record.accept_seconds = context.Now() - t;
  record.accepted = accepted.accepted;
  return accepted;
}

absl::Status CommitStep(const LoopContext& context, const AcceptResult& accepted, const TargetStep& verified,
                        LoopState& state, CycleRecord& record) {
  const GenerateOptions& options = context.options();
  const int64_t n = state.pending_position();
  double t = context.Now();
  for (int32_t token : accepted.tokens) {
    state.sequence.push_back(token);
    state.tokens.push_back(token);
    if (options.logprobs) {  // emitted token j comes from verified row j
      state.logprobs.push_back(
          TokenLogProb(verified.logits.data<float>() + record.committed * context.vocab(), context.vocab(), token));
    }
    ++record.committed;
    if (std::string why = context.StopReasonOf(token); !why.empty()) {
      state.stop_reason = std::move(why);
      break;
    }
    if (static_cast<int64_t>(state.tokens.size()) >= options.max_new_tokens) {
      state.stop_reason = "max_new_tokens";
      break;
    }
  }
  // Target rows n … n + committed − 1 are committed; later ones (rejected drafts) roll back.
  RETURN_IF_ERROR(context.target().Truncate(n + record.committed));
  const std::span<const int32_t> committed(state.tokens.data() + state.tokens.size() - record.committed,
                                           static_cast<size_t>(record.committed));
  if (options.on_tokens && !options.on_tokens(committed) && state.stop_reason.empty()) state.stop_reason = "cancelled";
  record.commit_seconds = context.Now() - t;
  record.last = !state.stop_reason.empty();
  if (context.drafter() != nullptr && !record.last) {
    t = context.Now();
    RETURN_IF_ERROR(context.drafter()->Observe(state.sequence, n, record.committed, verified));
    record.extend_seconds = context.Now() - t;
    record.observed = true;
  }
  return absl::OkStatus();
}

}  // namespace mtpspec
