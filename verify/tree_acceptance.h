// Acceptance over a verified token tree (docs/models.md, "Speculative verification").
//
// Node 0 of a tree is its root, the pending token; node i > 0 is a draft, a child of parents[i] <
// i. Row i of the target logits is the target's distribution for the token after node i, at
// absolute position first_position + depth(i) (the root's row is for first_position).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "verify/sampler.h"

namespace mtpspec {

struct TreeVerifyBlock {
  const float* target_logits = nullptr;  // [nodes, V]
  int64_t vocab = 0;
  std::span<const int32_t> tokens;   // [nodes] tokens[0] is the root, the others the drafts
  std::span<const int32_t> parents;  // [nodes] parents[0] = −1
  int64_t first_position = 0;
};

struct TreeAcceptResult {
  int64_t accepted = 0;         // m: drafts accepted, the depth reached
  std::vector<int64_t> path;    // [m + 1] the nodes kept: the root, then each accepted draft
  std::vector<int32_t> tokens;  // [m + 1] the m accepted drafts, then one target token
};

// Sampler-equality on a tree: at each depth, draw the target's token from the current node's row
// with the (seed, position) key; follow the child whose token equals the draw (the first such
// child, in node order), else emit the draw and stop. The emitted tokens are those plain decoding
// draws, so the output is identical to it. A chain tree gives AcceptDrafts' sampler-equality result.
absl::StatusOr<TreeAcceptResult> AcceptTreeBySamplerEquality(const TreeVerifyBlock& block,
                                                             const SamplingParams& sampling);

// Rejection sampling over a tree of deterministic drafts (multi-draft speculative sampling in the
// manner of SpecInfer, with one-hot draft distributions). At a node with target distribution p,
// its children are tried in node order: child i is accepted with probability p(d_i) (the
// Leviathan/Chen test min(1, p/q) with q one-hot at d_i), drawn with the (seed, position) key on
// stream kAccept + 8·i; a rejected child's token is removed from p and the rest renormalised. The
// first accepted child is followed; when every child is rejected, the remaining distribution is
// sampled (stream kResidual), and at a leaf the target draws its bonus token. Each step leaves the
// next token distributed as p, so the output is distributed as plain sampling. A chain-shaped tree
// gives AcceptDrafts' rejection result with deterministic drafts.
absl::StatusOr<TreeAcceptResult> AcceptTreeByRejection(const TreeVerifyBlock& block, const SamplingParams& sampling);

}  // namespace mtpspec
