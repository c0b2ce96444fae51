#include "spec/tree_loop.h"

#include <algorithm>
#include <cstring>

#include "spec/generator.h"
#include "verify/tree_acceptance.h"

namespace mtpspec {
namespace {

// Rows `rows` of a [L, W] tensor, in that order: [rows, W]. An empty tensor stays empty.
Tensor GatherRows(const Tensor& from, const std::vector<int64_t>& rows) {
  if (from.empty()) return Tensor();
  const int64_t width = from.dim(1);
  Tensor to = Tensor::Empty(DType::kF32, {static_cast<int64_t>(rows.size()), width});
  for (size_t i = 0; i < rows.size(); ++i) {
    std::memcpy(to.data<float>() + i * width, from.data<float>() + rows[i] * width, width * sizeof(float));
  }
  return to;
}

}  // namespace

TreeDraft TrimTree(TreeDraft tree, int64_t max_depth, int64_t max_nodes) {
  TreeDraft kept;
  kept.catch_up_seconds = tree.catch_up_seconds;
  std::vector<int64_t> depth = {0};       // [1 + nodes] depth of each verify row of the input tree
  std::vector<int32_t> new_row = {0};     // [1 + nodes] its row in the kept tree, −1 when dropped
  for (size_t i = 0; i < tree.tokens.size(); ++i) {
    const int32_t parent = tree.parents[i];
    depth.push_back(depth[parent] + 1);
    const bool keep = new_row[parent] >= 0 && depth.back() <= max_depth &&
                      static_cast<int64_t>(kept.tokens.size()) < max_nodes;
    new_row.push_back(keep ? static_cast<int32_t>(kept.tokens.size() + 1) : -1);
    if (!keep) continue;
    kept.tokens.push_back(tree.tokens[i]);
    kept.parents.push_back(new_row[parent]);
    kept.ranks.push_back(i < tree.ranks.size() ? tree.ranks[i] : 0);
  }
  if (!tree.probs.empty()) {  // the kept rows' draft distributions: the root's, then each kept node's
    kept.probs.push_back(std::move(tree.probs[0]));
    for (size_t i = 0; i < tree.tokens.size(); ++i) {
      if (new_row[i + 1] >= 0) kept.probs.push_back(i + 1 < tree.probs.size() ? std::move(tree.probs[i + 1]) : std::vector<double>());
    }
  }
  return kept;
}

absl::StatusOr<TreeBlock> TreeDraftStep(const LoopContext& context, const LoopState& state, int64_t max_depth,
                                        int64_t max_nodes, CycleRecord& record) {
  const GenerateOptions& options = context.options();
  record.tree = true;
  TreeBlock block;
  if (context.drafter() != nullptr && max_depth > 0 && max_nodes > 0) {
    const double t = context.Now();
    ASSIGN_OR_RETURN(TreeDraft tree, context.drafter()->ProposeTree(state.sequence, options.tree, context.draft_sampling()));
    if (tree.parents.size() != tree.tokens.size()) {
      return absl::InternalError("tree draft: as many parents as tokens are needed");
    }
    if (!tree.probs.empty() && tree.probs.size() != tree.tokens.size() + 1) {
      return absl::InternalError("tree draft: one draft distribution per verify row is needed");
    }
    for (size_t i = 0; i < tree.parents.size(); ++i) {
      if (tree.parents[i] < 0 || tree.parents[i] > static_cast<int32_t>(i)) {
        return absl::InternalError("tree draft: a node's parent must be an earlier row");
      }
    }
    block.tree = TrimTree(std::move(tree), max_depth, max_nodes);
    record.catch_up_seconds = std::max(0.0, block.tree.catch_up_seconds);
    record.draft_seconds = std::max(0.0, context.Now() - t - record.catch_up_seconds);
  }
  record.drafted = static_cast<int64_t>(block.tree.tokens.size());
  block.tokens = {state.sequence.back()};
  block.parents = {-1};
  if (block.tree.tokens.empty()) return block;  // a plain step
  block.tokens.insert(block.tokens.end(), block.tree.tokens.begin(), block.tree.tokens.end());
  block.parents.insert(block.parents.end(), block.tree.parents.begin(), block.tree.parents.end());
  std::vector<int64_t> depth(block.tokens.size(), 0);  // [1 + nodes]
  for (size_t r = 1; r < block.tokens.size(); ++r) depth[r] = depth[block.parents[r]] + 1;
  record.tree_depth = *std::max_element(depth.begin(), depth.end());
  return block;
}

absl::Status TreeAcceptStep(const LoopContext& context, LoopState& state, const TreeBlock& block,
                            const TargetStep& verified, CycleRecord& record) {
  const GenerateOptions& options = context.options();
  double t = context.Now();
  TreeVerifyBlock rows;
  rows.target_logits = verified.logits.data<float>();
  rows.vocab = context.vocab();
  rows.tokens = block.tokens;
  rows.parents = block.parents;
  rows.first_position = state.pending_position() + 1;
  if (options.sample_drafts) {
    if (block.tree.probs.empty()) return absl::InternalError("tree draft: sampled drafts came without their distributions");
    rows.draft_probs = block.tree.probs;
  }
  absl::StatusOr<TreeAcceptResult> rule_result;
  switch (options.accept.rule) {
    case AcceptRule::kRejection: rule_result = AcceptTreeByRejection(rows, options.accept.sampling); break;
    case AcceptRule::kSynthetic: rule_result = AcceptTreeSynthetic(rows, options.accept); break;
    default: rule_result = AcceptTreeBySamplerEquality(rows, options.accept.sampling); break;
  }
  ASSIGN_OR_RETURN(const TreeAcceptResult chosen, std::move(rule_result));
  record.accept_seconds = context.Now() - t;
  record.accepted = chosen.accepted;
  for (size_t i = 1; i < chosen.path.size(); ++i) record.accepted_ranks.push_back(block.tree.ranks[chosen.path[i] - 1]);

  // The kept path as a chain: its rows move to consecutive positions, and the commit sees the
  // path's logits and hidden states as a chain verify's rows.
  t = context.Now();
  RETURN_IF_ERROR(context.target().KeepTreePath(chosen.path));
  TargetStep path_rows;
  path_rows.logits = GatherRows(verified.logits, chosen.path);
  path_rows.hidden_postnorm = GatherRows(verified.hidden_postnorm, chosen.path);
  path_rows.hidden_prenorm = GatherRows(verified.hidden_prenorm, chosen.path);
  const double keep_seconds = context.Now() - t;
  AcceptResult accepted;
  accepted.accepted = chosen.accepted;
  accepted.tokens = chosen.tokens;
  RETURN_IF_ERROR(CommitStep(context, accepted, path_rows, state, record));
  record.commit_seconds += keep_seconds;
  return absl::OkStatus();
}

}  // namespace mtpspec
