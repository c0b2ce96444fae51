// The tree cycle of the speculative loop: the drafter grows a token tree, the target verifies every
// node in one forward (Target::RunTree), sampler-equality, rejection or (benchmarks) synthetic acceptance picks a path
// (verify/tree_acceptance.h), the target keeps that path (Target::KeepTreePath), and the loop's
// CommitStep commits it as it commits a chain. Generate runs it in place of DraftStep, VerifyStep and AcceptStep when
// GenerateOptions::tree is set.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "spec/loop.h"

namespace mtpspec {

// The tree's nodes down to depth `max_depth`, and at most `max_nodes` of them (breadth-first, so a
// kept node's parent is kept and a node keeps a prefix of its children, which for sampled children
// is still a draw without replacement), with the kept rows' draft distributions.
TreeDraft TrimTree(TreeDraft tree, int64_t max_depth, int64_t max_nodes);

// One cycle. The tree is trimmed so that an accepted path never runs past `max_depth` drafts (the
// token budget) and the verify never past `max_nodes` nodes (the cache); with neither room nor a
// drafter it is a plain step.
absl::Status TreeCycle(const LoopContext& context, LoopState& state, int64_t max_depth, int64_t max_nodes,
                       CycleRecord& record);

}  // namespace mtpspec
