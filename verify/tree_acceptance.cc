#include "verify/tree_acceptance.h"

#include "absl/strings/str_cat.h"

namespace mtpspec {

absl::StatusOr<TreeAcceptResult> AcceptTreeBySamplerEquality(const TreeVerifyBlock& block,
                                                             const SamplingParams& sampling) {
  const int64_t nodes = static_cast<int64_t>(block.tokens.size());
  if (nodes == 0 || static_cast<int64_t>(block.parents.size()) != nodes || block.parents[0] != -1) {
    return absl::InvalidArgumentError(absl::StrCat("tree accept: ", nodes, " tokens and ", block.parents.size(),
                                                   " parents; need as many, with parents[0] = -1"));
  }
  std::vector<std::vector<int64_t>> children(nodes);  // [nodes][their children, in node order]
  for (int64_t i = 1; i < nodes; ++i) {
    if (block.parents[i] < 0 || block.parents[i] >= i) {
      return absl::InvalidArgumentError(
          absl::StrCat("tree accept: parents[", i, "] = ", block.parents[i], " must name an earlier node"));
    }
    children[block.parents[i]].push_back(i);
  }
  TreeAcceptResult result;
  result.path.push_back(0);
  for (int64_t node = 0;;) {
    const int64_t depth = static_cast<int64_t>(result.path.size()) - 1;
    const int32_t draw =
        SampleToken(block.target_logits + node * block.vocab, block.vocab, sampling, block.first_position + depth);
    result.tokens.push_back(draw);
    int64_t next = -1;
    for (int64_t child : children[node]) {
      if (block.tokens[child] == draw) {
        next = child;
        break;
      }
    }
    if (next < 0) break;
    result.path.push_back(next);
    ++result.accepted;
    node = next;
  }
  return result;
}

}  // namespace mtpspec
