// The shape of a draft token tree, shared by the drafters that grow one and the loop that verifies
// it (docs/models.md, "Speculative verification").
//
// A static tree lists its branching per depth: "3,2,1" gives each node 3 children at depth 1, 2
// under each of those, 1 under each of those (3 + 6 + 6 = 15 draft nodes). A dynamic tree (EAGLE-2
// style) grows by cumulative draft probability up to a node budget. The chain of k drafts is the
// static tree 1,1,…,1. A verify is the pending token plus every draft node, so a tree has at most
// kMaxDraftTokens nodes (core/limits.h) and stays on the row-invariant path.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace mtpspec {

struct TreeShape {
  std::vector<int64_t> branching;  // static: children per node at depth 1, 2, …; empty for dynamic
  int64_t max_nodes = 0;           // dynamic (branching empty): the draft node budget M
  // Dynamic only: how many of the newest depth's nodes, by cumulative probability, are expanded
  // each step (each expansion is one row of the drafter's per-depth forward).
  int64_t expand_width = 4;

  bool empty() const { return branching.empty() && max_nodes == 0; }
  bool dynamic() const { return branching.empty() && max_nodes > 0; }
  // Draft nodes (without the root): static Σ_d Π_{i ≤ d} B_i; dynamic M.
  int64_t nodes() const;
  // The deepest a node can be: static the number of depths; dynamic M (a chain of M).
  int64_t depth() const;
  // "3,2,1", or "nodes=8".
  std::string Name() const;
};

// Parses "3,2,1"; errors name `what` (the flag or argument).
absl::StatusOr<std::vector<int64_t>> ParseTreeBranching(const std::string& text, const std::string& what);

// A zero or negative branch, a budget of 0 or less, both kinds at once, or more nodes than one
// verify holds: an error naming `what` and the limit.
absl::Status ValidateTreeShape(const TreeShape& shape, const std::string& what);

}  // namespace mtpspec
