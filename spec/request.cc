#include "spec/request.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "spec/tree_loop.h"

namespace mtpspec {
namespace {

absl::Status CheckPrompt(const Target& target, std::span<const int32_t> prompt, const GenerateOptions& options) {
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

}  // namespace

Request::Request(Target& target, Drafter* drafter, const GenerateOptions& options)
    : options_(options),
      tree_(!options.tree.empty() && drafter != nullptr),
      k_max_(drafter == nullptr ? 0 : (tree_ ? options.tree.depth() : options.k)),
      context_(target, drafter, options_),
      recorder_(result_.stats) {}

absl::StatusOr<std::unique_ptr<Request>> Request::Start(Target& target, Drafter* drafter,
                                                        std::span<const int32_t> prompt,
                                                        const GenerateOptions& options, bool external_lengths) {
  RETURN_IF_ERROR(ValidateGenerateOptions(options));
  RETURN_IF_ERROR(CheckPrompt(target, prompt, options));
  if (!options.tree.empty() && drafter != nullptr && !drafter->can_branch()) {
    return absl::InvalidArgumentError(absl::StrCat("tree drafting needs a drafter that can branch (mtp on the CPU); the ",
                                                   drafter->name(), " drafter cannot"));
  }
  target.Reset();
  if (drafter) drafter->Reset();
  std::unique_ptr<Request> request(new Request(target, drafter, options));
  Request& r = *request;
  SpecStats& stats = r.result_.stats;
  stats.drafter = drafter ? drafter->name() : "none";
  stats.accept_rule = options.custom_accept ? "custom" : AcceptRuleName(options.accept.rule);
  stats.lossy = options.custom_accept || !IsLossless(options.accept.rule);
  stats.synthetic = options.accept.rule == AcceptRule::kSynthetic;
  stats.adaptive_k = options.adaptive_k;
  stats.sampled_on_device = r.context_.device_sampling();
  stats.SizeFor(r.k_max_);
  if (r.tree_) stats.tree = options.tree.Name();
  if (options.adaptive_k && !external_lengths) r.adaptive_.emplace(r.k_max_, options.adaptive_controller);
  DraftLengthPolicy* policy = r.adaptive_ ? &*r.adaptive_ : nullptr;
  for (LoopObserver* o : {static_cast<LoopObserver*>(&r.recorder_), static_cast<LoopObserver*>(policy), options.observer}) {
    if (o != nullptr) r.observers_.push_back(o);
  }

  r.start_ = r.context_.Now();
  PrefillRecord prefill;
  RETURN_IF_ERROR(PrefillStep(r.context_, prompt, policy, r.state_, prefill));
  for (LoopObserver* o : r.observers_) o->OnPrefill(prefill);
  return request;
}

bool Request::BeginCycle() {
  if (done()) return false;
  if (generated() >= options_.max_new_tokens) {
    state_.stop_reason = "max_new_tokens";
    return false;
  }
  if (state_.pending_position() >= target().capacity()) {
    state_.stop_reason = "capacity";
    return false;
  }
  cycle_ = CycleRecord();
  cycle_start_ = context_.Now();
  draft_ = mtpspec::Draft();
  tree_block_.reset();
  verified_.reset();
  return true;
}

absl::Status Request::RunTreeCycle() {
  std::vector<int32_t> parents;
  RETURN_IF_ERROR(DraftTree(&parents).status());
  RETURN_IF_ERROR(Verify());
  return EndCycle();
}

absl::StatusOr<std::vector<int32_t>> Request::DraftTree(std::vector<int32_t>* parents) {
  if (!tree_) return absl::FailedPreconditionError("DraftTree: this request drafts chains");
  // Never past the token budget (depth) or the cache (nodes).
  const int64_t room = target().capacity() - state_.pending_position() - 1;
  ASSIGN_OR_RETURN(TreeBlock block,
                   TreeDraftStep(context_, state_, std::min(options_.max_new_tokens - generated() - 1, room), room, cycle_));
  parents->clear();
  if (block.tree.tokens.empty()) return block.tokens;  // [pending token]: a plain step
  *parents = block.parents;
  std::vector<int32_t> tokens = block.tokens;
  tree_block_ = std::move(block);
  return tokens;
}

int64_t Request::DraftLength(std::optional<int64_t> fixed) {
  int64_t k = k_max_;
  if (context_.drafter() == nullptr) {
    k = 0;
  } else if (fixed) {
    k = *fixed;
  } else if (adaptive_) {
    k = std::min(adaptive_->Choose(state_.TokensLeft(context_), &cycle_.probe), k_max_);
  }
  // Never draft past the token budget or the cache.
  const int64_t n = state_.pending_position();
  return std::max<int64_t>(std::min({k, options_.max_new_tokens - generated() - 1, target().capacity() - n - 1}), 0);
}

absl::StatusOr<std::vector<int32_t>> Request::Draft(int64_t k) {
  ASSIGN_OR_RETURN(draft_, DraftStep(context_, state_, k, cycle_));
  std::vector<int32_t> block = {state_.sequence.back()};  // [1 + k'] at positions n … n + k'
  block.insert(block.end(), draft_.tokens.begin(), draft_.tokens.end());
  return block;
}

std::vector<int32_t> Request::SetDraft(mtpspec::Draft draft, int64_t k, double seconds) {
  draft_ = std::move(draft);
  RecordDraft(draft_, k, seconds, cycle_);
  std::vector<int32_t> block = {state_.sequence.back()};  // [1 + k'] at positions n … n + k'
  block.insert(block.end(), draft_.tokens.begin(), draft_.tokens.end());
  return block;
}

absl::Status Request::Verify() {
  if (tree_block_) {
    const double t = context_.Now();
    ASSIGN_OR_RETURN(TargetStep step, context_.RunTree(tree_block_->tokens, tree_block_->parents));
    cycle_.verify_seconds = context_.Now() - t;
    verified_ = std::move(step);
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(TargetStep step, VerifyStep(context_, state_, draft_, cycle_));
  verified_ = std::move(step);
  return absl::OkStatus();
}

absl::Status Request::SetVerified(TargetStep step, double seconds) {
  const int64_t rows = tree_block_ ? static_cast<int64_t>(tree_block_->tokens.size())
                                   : 1 + static_cast<int64_t>(draft_.tokens.size());
  if (step.logits.empty() || step.logits.view().ndim != 2 || step.logits.dim(0) != rows ||
      step.logits.dim(1) != context_.vocab()) {
    return absl::InternalError(absl::StrCat("a batched verify returned logits of the wrong shape for a block of ", rows,
                                            " rows"));
  }
  RETURN_IF_ERROR(context_.CheckLogits(step.logits, state_.pending_position(), rows));
  cycle_.verify_seconds = seconds;
  verified_ = std::move(step);
  return absl::OkStatus();
}

absl::Status Request::EndCycle() {
  if (!verified_) return absl::FailedPreconditionError("EndCycle: the cycle's block has not been verified");
  if (tree_block_) {
    RETURN_IF_ERROR(TreeAcceptStep(context_, state_, *tree_block_, *verified_, cycle_));
  } else {
    ASSIGN_OR_RETURN(const AcceptResult accepted, AcceptStep(context_, state_, draft_, *verified_, cycle_));
    RETURN_IF_ERROR(CommitStep(context_, accepted, *verified_, state_, cycle_));
  }
  tree_block_.reset();
  verified_.reset();
  cycle_.cycle_seconds = context_.Now() - cycle_start_;
  for (LoopObserver* o : observers_) o->OnCycle(cycle_);
  return absl::OkStatus();
}

void Request::Cancel() {
  if (state_.stop_reason.empty()) state_.stop_reason = "cancelled";
}

GenerateResult Request::Finish() {
  result_.stats.total_seconds = context_.Now() - start_;
  result_.tokens = std::move(state_.tokens);
  result_.logprobs = std::move(state_.logprobs);
  result_.stop_reason = std::move(state_.stop_reason);
  return std::move(result_);
}

}  // namespace mtpspec
