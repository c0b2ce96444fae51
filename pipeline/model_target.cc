#include "pipeline/model_target.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "model/config.h"

namespace mtpspec {

absl::StatusOr<std::unique_ptr<ModelTarget>> ModelTarget::Create(const Model& model, int64_t capacity,
                                                                 AttentionOptions attention, LatentStorage storage) {
  ASSIGN_OR_RETURN(auto cache, model.NewCache(capacity, storage));
  return std::unique_ptr<ModelTarget>(new ModelTarget(model, std::move(cache), attention));
}

absl::StatusOr<TargetStep> RunOnCache(const Model& model, KvCache& cache, std::span<const int32_t> tokens,
                                      const AttentionOptions& attention, bool all_logits, int64_t pass_rows) {
  std::vector<int64_t> positions(tokens.size());  // [rows]
  for (size_t i = 0; i < tokens.size(); ++i) positions[i] = cache.length() + static_cast<int64_t>(i);
  ForwardOptions options;
  options.attention = attention;
  if (!all_logits) options.logit_rows = {static_cast<int64_t>(tokens.size()) - 1};
  ASSIGN_OR_RETURN(ForwardOutput out, ForwardInPasses(model, cache, tokens, positions, options, pass_rows));
  TargetStep step;
  step.logits = std::move(out.logits);
  step.hidden_postnorm = std::move(out.hidden_postnorm);
  step.hidden_prenorm = std::move(out.hidden_prenorm);
  return step;
}

absl::StatusOr<TargetStep> ModelTarget::Run(std::span<const int32_t> tokens, bool all_logits) {
  kept_logits_ = Tensor();
  tree_first_ = -1;
  return RunOnCache(model_, *cache_, tokens, attention_, all_logits);
}

absl::StatusOr<TargetStep> ModelTarget::RunKeepingLogits(std::span<const int32_t> tokens, bool all_logits) {
  tree_first_ = -1;
  ASSIGN_OR_RETURN(TargetStep step, RunOnCache(model_, *cache_, tokens, attention_, all_logits));
  kept_logits_ = std::move(step.logits);
  step.logits = Tensor();  // none cross to the caller
  return step;
}

absl::StatusOr<TargetStep> RunTreeOnCache(const Model& model, KvCache& cache, std::span<const int32_t> tokens,
                                          std::span<const int32_t> parents, const AttentionOptions& attention) {
  if (tokens.size() != parents.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("RunTree: ", tokens.size(), " tokens but ", parents.size(), " parents"));
  }
  const int64_t n = cache.length();
  ASSIGN_OR_RETURN(const TreeMask mask, TreeMaskFromParents(n, parents));
  const std::vector<int64_t> depths = TreeDepths(parents);  // [rows]
  std::vector<int64_t> positions;                           // [rows] n + depth
  for (int64_t depth : depths) positions.push_back(n + depth);
  ForwardOptions options;
  options.attention = attention;
  options.attention.tree = &mask;
  ASSIGN_OR_RETURN(ForwardOutput out, model.Forward(cache, tokens, positions, options));
  TargetStep step;
  step.logits = std::move(out.logits);
  step.hidden_postnorm = std::move(out.hidden_postnorm);
  step.hidden_prenorm = std::move(out.hidden_prenorm);
  return step;
}

absl::Status KeepTreePathOnCache(KvCache& cache, int64_t first, std::span<const int32_t> parents,
                                 std::span<const int64_t> path) {
  const int64_t rows = static_cast<int64_t>(parents.size());
  std::vector<int64_t> slots;  // [path] the tree slots kept, in order
  for (size_t i = 0; i < path.size(); ++i) {
    const bool from_parent = i == 0 ? path[0] == 0 : (path[i] > 0 && path[i] < rows && parents[path[i]] == path[i - 1]);
    if (!from_parent) {
      return absl::InvalidArgumentError(absl::StrCat("KeepTreePath: path[", i, "] = ", path[i],
                                                     i == 0 ? " is not the root 0" : " is not a child of the row before"));
    }
    slots.push_back(first + path[i]);
  }
  return cache.KeepSlots(first, slots);
}

absl::StatusOr<TargetStep> ModelTarget::RunTree(std::span<const int32_t> tokens, std::span<const int32_t> parents) {
  kept_logits_ = Tensor();
  tree_first_ = -1;
  const int64_t n = cache_->length();
  ASSIGN_OR_RETURN(TargetStep step, RunTreeOnCache(model_, *cache_, tokens, parents, attention_));
  tree_first_ = n;
  tree_parents_.assign(parents.begin(), parents.end());
  return step;
}

absl::Status ModelTarget::KeepTreePath(std::span<const int64_t> path) {
  if (tree_first_ < 0) return absl::FailedPreconditionError("KeepTreePath: no RunTree since the last Run");
  RETURN_IF_ERROR(KeepTreePathOnCache(*cache_, tree_first_, tree_parents_, path));
  tree_first_ = -1;
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int32_t>> ModelTarget::SampleLastRun(const SamplingParams& params, int64_t first_position) {
  if (!samples_in_target_) return Target::SampleLastRun(params, first_position);
  if (kept_logits_.empty()) {
    return absl::FailedPreconditionError("ModelTarget::SampleLastRun: no RunKeepingLogits has run since the last Run");
  }
  RETURN_IF_ERROR(ValidateSamplingParams(params));
  const int64_t rows = kept_logits_.dim(0), vocab = kept_logits_.dim(1);
  std::vector<int32_t> draws;  // [R]
  for (int64_t r = 0; r < rows; ++r) {
    draws.push_back(SampleToken(kept_logits_.data<float>() + r * vocab, vocab, params, first_position + r));
  }
  return draws;
}

namespace {

bool SameAttention(const AttentionOptions& a, const AttentionOptions& b) {
  return a.path == b.path && a.form == b.form && a.gather_max_rows == b.gather_max_rows &&
         a.reuse_topk == b.reuse_topk && a.tree == nullptr && b.tree == nullptr;
}

}  // namespace

bool ModelBatchVerifier::CanBatch(const Target& target) const {
  const auto* member = dynamic_cast<const BatchableTarget*>(&target);
  return member != nullptr && &member->batch_model() == &model_ && member->can_join_batch();
}

bool ModelBatchVerifier::CanBatchTree(const Target& target) const {
  const auto* member = dynamic_cast<const BatchableTarget*>(&target);
  return CanBatch(target) && member->can_join_tree_batch();
}

absl::StatusOr<BatchVerification> ModelBatchVerifier::VerifyBatchWithTrees(
    std::span<Target* const> targets, std::span<const std::vector<int32_t>> blocks,
    std::span<const std::vector<int32_t>> tree_parents) {
  if (targets.size() != blocks.size() || targets.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("VerifyBatch: ", targets.size(), " targets for ", blocks.size(), " blocks (at least one of each)"));
  }
  if (!tree_parents.empty() && tree_parents.size() != targets.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("VerifyBatch: ", tree_parents.size(), " tree parent lists for ", targets.size(), " blocks"));
  }
  const auto parents_of = [&](size_t i) {
    return tree_parents.empty() ? std::span<const int32_t>() : std::span<const int32_t>(tree_parents[i]);
  };
  std::vector<BatchableTarget*> members;            // [targets]
  std::vector<std::vector<int64_t>> positions;      // [targets][block rows]
  std::vector<TreeMask> masks(targets.size());      // [targets] (unused for chains)
  std::vector<BatchSequence> sequences;             // [targets]
  for (size_t i = 0; i < targets.size(); ++i) {
    auto* member = dynamic_cast<BatchableTarget*>(targets[i]);
    const bool tree = !parents_of(i).empty();
    if (member == nullptr || !(tree ? CanBatchTree(*targets[i]) : CanBatch(*targets[i]))) {
      return absl::InvalidArgumentError(absl::StrCat("VerifyBatch: target ", i, " cannot join this model's batch",
                                                     tree ? " with a token tree" : ""));
    }
    if (!SameAttention(member->batch_attention(),
                       members.empty() ? member->batch_attention() : members[0]->batch_attention())) {
      return absl::InvalidArgumentError(
          absl::StrCat("VerifyBatch: target ", i, "'s attention options differ from target 0's"));
    }
    members.push_back(member);
    std::vector<int64_t>& p = positions.emplace_back();
    const int64_t n = targets[i]->length();
    if (tree) {  // positions n + depth under the tree's mask, as RunTreeOnCache runs it
      if (parents_of(i).size() != blocks[i].size()) {
        return absl::InvalidArgumentError(absl::StrCat("VerifyBatch: block ", i, " has ", blocks[i].size(),
                                                       " tokens but ", parents_of(i).size(), " parents"));
      }
      ASSIGN_OR_RETURN(masks[i], TreeMaskFromParents(n, parents_of(i)));
      for (int64_t depth : TreeDepths(parents_of(i))) p.push_back(n + depth);
    } else {
      for (size_t r = 0; r < blocks[i].size(); ++r) p.push_back(n + static_cast<int64_t>(r));
    }
  }
  std::vector<int64_t> firsts;  // [targets] the committed lengths before the forward
  for (Target* target : targets) firsts.push_back(target->length());
  for (BatchableTarget* member : members) member->BeforeBatchedRun();
  for (size_t i = 0; i < targets.size(); ++i) {
    sequences.push_back({&members[i]->batch_cache(), blocks[i], positions[i], parents_of(i).empty() ? nullptr : &masks[i]});
  }
  ForwardOptions options;
  options.attention = members[0]->batch_attention();
  ASSIGN_OR_RETURN(BatchForwardOutput out, model_.ForwardBatch(sequences, options));
  for (size_t i = 0; i < targets.size(); ++i) {
    if (!parents_of(i).empty()) members[i]->AfterBatchedTree(firsts[i], parents_of(i));
  }
  BatchVerification verification;
  verification.rows = out.rows;
  const ModelConfig& config = model_.config();
  for (int64_t used : out.experts_used) {
    if (used == 0) continue;  // a dense layer
    verification.experts_read += used;
    verification.expert_choices += out.rows * config.num_experts_per_tok;
  }
  for (size_t i = 0; i < targets.size(); ++i) {
    TargetStep& step = verification.steps.emplace_back();
    step.logits = std::move(out.sequences[i].logits);
    step.hidden_postnorm = std::move(out.sequences[i].hidden_postnorm);
    step.hidden_prenorm = std::move(out.sequences[i].hidden_prenorm);
  }
  return verification;
}

}  // namespace mtpspec
