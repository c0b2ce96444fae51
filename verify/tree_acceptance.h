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
#include "verify/acceptance.h"
#include "verify/sampler.h"

namespace mtpspec {

struct TreeVerifyBlock {
  const float* target_logits = nullptr;  // [nodes, V]
  int64_t vocab = 0;
  std::span<const int32_t> tokens;   // [nodes] tokens[0] is the root, the others the drafts
  std::span<const int32_t> parents;  // [nodes] parents[0] = −1
  int64_t first_position = 0;
  // Sampled drafts (rejection only): draft_probs[i] is the draft distribution q ([V]) that node i's
  // children were drawn from, without replacement, in node order; empty where node i's children
  // are deterministic (or it has none). An empty span: every node's children are deterministic.
  std::span<const std::vector<double>> draft_probs;  // [nodes] or empty
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

// Rejection sampling over a tree (multi-draft speculative sampling: SpecInfer's recursive
// rejection over siblings, in the without-replacement form of recursive speculative decoding). At a
// node with target distribution p_1 = p, its children d_1, d_2, … are tried in node order. Child i
// is accepted with probability min(1, p_i(d_i) / q_i(d_i)), drawn with the (seed, position) key on
// stream kAccept + 8·i; on rejection p_{i+1} = normalise(max(0, p_i − q_i)). For sampled children
// q_1 is the node's draft distribution and q_{i+1} is q_i with d_i removed and renormalised (the
// distribution d_{i+1} was drawn from); for deterministic children q_i is one-hot at d_i. The first
// accepted child is followed; when every child is rejected, the remaining p is sampled (stream
// kResidual), and at a leaf the target draws its bonus token. Each step leaves the next token
// distributed as p, so the output is distributed as plain sampling. A chain-shaped tree gives
// AcceptDrafts' rejection result, with deterministic or sampled drafts. A sampled child whose
// token has no mass left under q_i is an error (it cannot have been drawn).
absl::StatusOr<TreeAcceptResult> AcceptTreeByRejection(const TreeVerifyBlock& block, const SamplingParams& sampling);

// BENCHMARK ONLY: synthetic acceptance over a tree, whatever the tokens. At a node reached at depth
// j, its children are tried in node order; child i is accepted with probability
// params.synthetic_tree_rates[j][i] (AcceptParams), drawn with the (seed, position) key on stream
// kAccept + 8·i, and the first accepted child is followed. When none is, or at a leaf, the target
// draws its token from the node's row. A chain-shaped tree gives AcceptDrafts' synthetic result
// with synthetic_rates[j] = synthetic_tree_rates[j][0]. The output is not the target's.
absl::StatusOr<TreeAcceptResult> AcceptTreeSynthetic(const TreeVerifyBlock& block, const AcceptParams& params);

}  // namespace mtpspec
