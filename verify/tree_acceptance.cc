#include "verify/tree_acceptance.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "core/philox.h"
#include "core/status.h"

namespace mtpspec {

namespace {

// Each node's children, in node order, after checking the tree's shape. [nodes][children]
absl::StatusOr<std::vector<std::vector<int64_t>>> Children(const TreeVerifyBlock& block) {
  const int64_t nodes = static_cast<int64_t>(block.tokens.size());
  if (nodes == 0 || static_cast<int64_t>(block.parents.size()) != nodes || block.parents[0] != -1) {
    return absl::InvalidArgumentError(absl::StrCat("tree accept: ", nodes, " tokens and ", block.parents.size(),
                                                   " parents; need as many, with parents[0] = -1"));
  }
  std::vector<std::vector<int64_t>> children(nodes);
  for (int64_t i = 1; i < nodes; ++i) {
    if (block.parents[i] < 0 || block.parents[i] >= i) {
      return absl::InvalidArgumentError(
          absl::StrCat("tree accept: parents[", i, "] = ", block.parents[i], " must name an earlier node"));
    }
    if (block.tokens[i] < 0 || block.tokens[i] >= block.vocab) {
      return absl::InvalidArgumentError(absl::StrCat("tree accept: tokens[", i, "] = ", block.tokens[i],
                                                     " is outside the vocabulary [0, ", block.vocab, ")"));
    }
    children[block.parents[i]].push_back(i);
  }
  return children;
}

// The synthetic rule's rate for the child of `rank` of a node at `depth` (AcceptParams).
double SyntheticRate(const AcceptParams& params, int64_t depth, int64_t rank) {
  const auto last_or = [](const std::vector<double>& v, int64_t i) {
    return v.empty() ? 0.0 : v[std::min<size_t>(static_cast<size_t>(i), v.size() - 1)];
  };
  const std::vector<std::vector<double>>& table = params.synthetic_tree_rates;
  if (table.empty()) return rank == 0 ? last_or(params.synthetic_rates, depth) : 0.0;
  return last_or(table[std::min<size_t>(static_cast<size_t>(depth), table.size() - 1)], rank);
}

}  // namespace

absl::StatusOr<TreeAcceptResult> AcceptTreeBySamplerEquality(const TreeVerifyBlock& block,
                                                             const SamplingParams& sampling) {
  ASSIGN_OR_RETURN(const std::vector<std::vector<int64_t>> children, Children(block));
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

absl::StatusOr<TreeAcceptResult> AcceptTreeByRejection(const TreeVerifyBlock& block, const SamplingParams& sampling) {
  ASSIGN_OR_RETURN(const std::vector<std::vector<int64_t>> children, Children(block));
  const int64_t nodes = static_cast<int64_t>(block.tokens.size());
  if (!block.draft_probs.empty() && static_cast<int64_t>(block.draft_probs.size()) != nodes) {
    return absl::InvalidArgumentError(absl::StrCat("tree accept: ", block.draft_probs.size(),
                                                   " draft distributions for ", nodes, " nodes"));
  }
  TreeAcceptResult result;
  result.path.push_back(0);
  std::vector<double> p, q, residual;  // [V]
  for (int64_t node = 0;;) {
    const int64_t position = block.first_position + static_cast<int64_t>(result.path.size()) - 1;
    const float* logits = block.target_logits + node * block.vocab;
    if (children[node].empty()) {  // a leaf: the bonus token
      result.tokens.push_back(SampleToken(logits, block.vocab, sampling, position));
      break;
    }
    SamplingDistribution(logits, block.vocab, sampling, &p);
    const bool sampled = !block.draft_probs.empty() && !block.draft_probs[node].empty();
    if (sampled) {
      if (static_cast<int64_t>(block.draft_probs[node].size()) != block.vocab) {
        return absl::InvalidArgumentError(absl::StrCat("tree accept: draft_probs[", node, "] has ",
                                                       block.draft_probs[node].size(), " entries for a vocabulary of ",
                                                       block.vocab));
      }
      q = block.draft_probs[node];
    }
    int64_t next = -1;
    for (size_t i = 0; i < children[node].size(); ++i) {
      const int64_t child = children[node][i];
      const int32_t d = block.tokens[child];
      const double q_d = sampled ? q[d] : 1.0;
      if (!(q_d > 0.0)) {
        return absl::InvalidArgumentError(absl::StrCat("tree accept: node ", child, " (token ", d,
                                                       ") has no mass under the draft distribution it was drawn from"));
      }
      const uint32_t stream = static_cast<uint32_t>(RngStream::kAccept) + 8 * static_cast<uint32_t>(i);
      if (UniformAt(sampling.seed, static_cast<uint64_t>(position), stream) < std::min(1.0, p[d] / q_d)) {
        next = child;
        break;
      }
      // p ← normalize(max(0, p − q_i)), summed in id order as the chain's rule does.
      residual.assign(block.vocab, 0.0);
      double mass = 0.0;
      for (int64_t v = 0; v < block.vocab; ++v) {
        const double q_v = sampled ? q[v] : (v == d ? 1.0 : 0.0);
        residual[v] = std::max(0.0, p[v] - q_v);
        mass += residual[v];
      }
      if (mass <= 0.0) {
        residual = p;  // p == q_i and still rejected: a rounding event; keep p
        mass = 1.0;
      }
      for (int64_t v = 0; v < block.vocab; ++v) p[v] = residual[v] / mass;
      // q ← q_i without d_i, renormalised: the next sibling's draft distribution (all zero when
      // nothing is left to draw, and a later sibling is then an error above).
      if (sampled) RemoveAndRenormalize(&q, d);
    }
    if (next < 0) {
      result.tokens.push_back(DrawFrom(p, UniformAt(sampling.seed, static_cast<uint64_t>(position),
                                                    static_cast<uint32_t>(RngStream::kResidual))));
      break;
    }
    result.tokens.push_back(block.tokens[next]);
    result.path.push_back(next);
    ++result.accepted;
    node = next;
  }
  return result;
}

absl::StatusOr<TreeAcceptResult> AcceptTreeSynthetic(const TreeVerifyBlock& block, const AcceptParams& params) {
  ASSIGN_OR_RETURN(const std::vector<std::vector<int64_t>> children, Children(block));
  TreeAcceptResult result;
  result.path.push_back(0);
  for (int64_t node = 0;;) {
    const int64_t depth = static_cast<int64_t>(result.path.size()) - 1;
    const int64_t position = block.first_position + depth;
    int64_t next = -1;
    for (size_t i = 0; i < children[node].size(); ++i) {
      const uint32_t stream = static_cast<uint32_t>(RngStream::kAccept) + 8 * static_cast<uint32_t>(i);
      if (UniformAt(params.sampling.seed, static_cast<uint64_t>(position), stream) <
          SyntheticRate(params, depth, static_cast<int64_t>(i))) {
        next = children[node][i];
        break;
      }
    }
    if (next < 0) {
      result.tokens.push_back(
          SampleToken(block.target_logits + node * block.vocab, block.vocab, params.sampling, position));
      break;
    }
    result.tokens.push_back(block.tokens[next]);
    result.path.push_back(next);
    ++result.accepted;
    node = next;
  }
  return result;
}

}  // namespace mtpspec
