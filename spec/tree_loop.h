// The tree cycle of the speculative loop: the drafter grows a token tree, the target verifies every
// node in one forward (Target::RunTree), sampler-equality, rejection or (benchmarks) synthetic acceptance picks a path
// (verify/tree_acceptance.h), the target keeps that path (Target::KeepTreePath), and the loop's
// CommitStep commits it as it commits a chain. A request (spec/request.h) runs these in place of
// DraftStep and AcceptStep when GenerateOptions::tree is set, alone or in a batch's forward.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "spec/loop.h"

namespace mtpspec {

// The tree's nodes down to depth `max_depth`, and at most `max_nodes` of them (breadth-first, so a
// kept node's parent is kept and a node keeps a prefix of its children, which for sampled children
// is still a draw without replacement), with the kept rows' draft distributions.
TreeDraft TrimTree(TreeDraft tree, int64_t max_depth, int64_t max_nodes);

// A tree cycle's verify block: the trimmed tree and the rows of its forward.
struct TreeBlock {
  TreeDraft tree;                // the drafter's tree after TrimTree (no nodes: a plain step)
  std::vector<int32_t> tokens;   // [1 + nodes] the pending token, then the drafts
  std::vector<int32_t> parents;  // [1 + nodes] parents[0] = −1, then each node's parent row
};

// A tree cycle in two steps around its verify: TreeDraftStep grows the tree, trimmed so that an
// accepted path never runs past `max_depth` drafts (the token budget) and the verify never past
// `max_nodes` nodes (the cache); with neither room nor a drafter it has no nodes, and the cycle is a
// plain step (VerifyStep, AcceptStep and CommitStep with no draft). The target then verifies
// [tokens, parents] (Target::RunTree, or a batched forward that gives the same rows), and
// TreeAcceptStep picks the path, has the target keep it (Target::KeepTreePath) and commits it.
absl::StatusOr<TreeBlock> TreeDraftStep(const LoopContext& context, const LoopState& state, int64_t max_depth,
                                        int64_t max_nodes, CycleRecord& record);
absl::Status TreeAcceptStep(const LoopContext& context, LoopState& state, const TreeBlock& block,
                            const TargetStep& verified, CycleRecord& record);

}  // namespace mtpspec
