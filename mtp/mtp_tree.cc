// MtpDraftChain::ProposeTree: draft trees from the MTP head (mtp/mtp_chain.h).
//
// The module cache past the committed pairs holds the tree's stepped nodes in the order they were
// stepped (depth by depth): offset i from the first speculative slot is the i-th stepped node. A
// node sees the committed pairs, the slots of its stepped ancestors and its own, so its step
// attends exactly as the chain step of its path would (attention/tree_mask.h).
#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "mtp/mtp_chain.h"

namespace mtpspec {
namespace {

// A node of a tree being grown.
struct GrowNode {
  int64_t parent = -1;  // index into the node list; −1 = the root (the pending token)
  int32_t token = 0;
  int64_t depth = 1;
  int64_t rank = 0;     // among the parent's candidates
  double prob = 0;      // under the parent's head, softmax at T = 1
  double cumulative = 0;  // product of prob along the path
  int64_t state = -1;   // the backend state of its step, −1 while not stepped
  uint64_t sees = 0;    // its path's slot offsets (bits), once stepped
};

// The probabilities of `ids` under softmax at T = 1 of a row.
std::vector<double> SoftmaxAt(const float* logits, int64_t vocab, const std::vector<int32_t>& ids) {
  double top = logits[0];
  for (int64_t v = 1; v < vocab; ++v) top = std::max(top, static_cast<double>(logits[v]));
  double total = 0;
  for (int64_t v = 0; v < vocab; ++v) total += std::exp(static_cast<double>(logits[v]) - top);
  std::vector<double> probs;
  for (int32_t id : ids) probs.push_back(std::exp(static_cast<double>(logits[id]) - top) / total);
  return probs;
}

// The `count` highest logits of a row, best first, equal logits by lower id (the order Argmax
// picks in), with their probabilities under softmax at T = 1.
void TopTokens(const float* logits, int64_t vocab, int64_t count, std::vector<int32_t>* ids,
               std::vector<double>* probs) {
  count = std::min(count, vocab);
  std::vector<int32_t> order(vocab);  // [V]
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + count, order.end(), [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  ids->assign(order.begin(), order.begin() + count);
  *probs = SoftmaxAt(logits, vocab, *ids);
}

}  // namespace

absl::StatusOr<MtpTreeDraft> MtpDraftChain::ProposeTree(std::span<const int32_t> sequence, const TreeShape& shape,
                                                        const MtpChildPicker& pick) {
  RETURN_IF_ERROR(ValidateTreeShape(shape, "MTP tree"));
  if (pick && shape.dynamic()) {
    return absl::InvalidArgumentError(
        "MTP tree: a dynamic tree grows by the head's probabilities; picked (sampled) children need a static tree");
  }
  MtpTreeDraft draft;
  if (shape.empty()) {
    extend_at_commit_ = true;
    return draft;
  }
  ASSIGN_OR_RETURN(const int64_t anchor, BeginDraft(sequence, &draft.catch_up_seconds));
  if (anchor < 0) return draft;
  const int64_t first_slot = committed_;  // = anchor + 1, where the chain's first step writes
  const bool share = ShareSelection();
  const int64_t vocab = backend_->config().vocab_size;
  RETURN_IF_ERROR(backend_->BeginTree());

  std::vector<GrowNode> nodes;        // every candidate made, in the order made
  std::vector<int64_t> frontier;      // nodes whose children the next depth adds (−1: the root)
  std::vector<int64_t> frontier_states = {0};
  frontier.push_back(-1);
  int64_t stepped = 0;                // slots written past first_slot
  std::vector<int32_t> ids;
  std::vector<double> probs;
  std::vector<double> root_distribution;              // [V] or empty
  std::vector<std::vector<double>> distributions;     // [nodes made] each node's children's, or empty
  for (int64_t depth = 1; depth <= shape.depth() && !frontier.empty(); ++depth) {
    ASSIGN_OR_RETURN(const Tensor heads, backend_->TreeHeads(frontier_states));  // [frontier, V]
    const int64_t width = shape.dynamic() ? shape.expand_width : shape.branching[depth - 1];
    std::vector<int64_t> made;  // the nodes of this depth
    for (size_t f = 0; f < frontier.size(); ++f) {
      const float* row = heads.data<float>() + f * vocab;  // [V]
      if (pick) {
        ASSIGN_OR_RETURN(MtpChildPick picked,
                         pick(row, vocab, anchor + 1 + depth, static_cast<int64_t>(made.size()), width));
        if (static_cast<int64_t>(picked.tokens.size()) > width) {
          return absl::InternalError("MTP tree: the picker returned more children than asked");
        }
        for (int32_t id : picked.tokens) {
          if (id < 0 || id >= vocab) return absl::InternalError("MTP tree: the picker returned a token outside the vocabulary");
        }
        ids = std::move(picked.tokens);
        probs = SoftmaxAt(row, vocab, ids);
        (frontier[f] < 0 ? root_distribution : distributions[frontier[f]]) = std::move(picked.distribution);
      } else {
        TopTokens(row, vocab, width, &ids, &probs);
      }
      const double parent_cumulative = frontier[f] < 0 ? 1.0 : nodes[frontier[f]].cumulative;
      for (size_t c = 0; c < ids.size(); ++c) {
        GrowNode node;
        node.parent = frontier[f];
        node.token = ids[c];
        node.depth = depth;
        node.rank = static_cast<int64_t>(c);
        node.prob = probs[c];
        node.cumulative = parent_cumulative * probs[c];
        made.push_back(static_cast<int64_t>(nodes.size()));
        nodes.push_back(node);
        distributions.emplace_back();
      }
    }
    if (depth == shape.depth()) break;  // leaves: no step
    // The nodes that get children: every node of a static tree; a dynamic tree's expand_width best
    // by cumulative probability (equal ones in the order made), unless none of them can still enter
    // the max_nodes best, since a child is never more probable than its parent.
    std::vector<int64_t> expand = made;
    if (shape.dynamic()) {
      std::stable_sort(expand.begin(), expand.end(),
                       [&](int64_t a, int64_t b) { return nodes[a].cumulative > nodes[b].cumulative; });
      expand.resize(std::min<int64_t>(shape.expand_width, static_cast<int64_t>(expand.size())));
      std::vector<double> all;
      for (const GrowNode& n : nodes) all.push_back(n.cumulative);
      if (static_cast<int64_t>(all.size()) >= shape.max_nodes) {
        std::nth_element(all.begin(), all.begin() + shape.max_nodes - 1, all.end(), std::greater<double>());
        if (nodes[expand[0]].cumulative <= all[shape.max_nodes - 1]) break;
      }
      std::sort(expand.begin(), expand.end());  // back in the order made: slots increase along paths
    }
    // The step writes slots first_slot + stepped …; stop growing where the cache or the mask's
    // slot range ends (the nodes made so far stay, as leaves).
    const int64_t rows = static_cast<int64_t>(expand.size());
    if (stepped + rows > TreeMask::kMaxSlots || first_slot + stepped + rows > backend_->capacity()) break;
    TreeMask mask;
    mask.first_slot = first_slot;
    std::vector<int64_t> parent_states, positions;  // [rows]
    std::vector<int32_t> tokens;                    // [rows]
    for (int64_t r = 0; r < rows; ++r) {
      GrowNode& node = nodes[expand[r]];
      const int64_t offset = stepped + r;
      node.sees = (node.parent < 0 ? 0 : nodes[node.parent].sees) | (uint64_t{1} << offset);
      mask.slots.push_back(first_slot + offset);
      mask.sees.push_back(node.sees);
      parent_states.push_back(node.parent < 0 ? 0 : nodes[node.parent].state);
      tokens.push_back(node.token);
      positions.push_back(anchor + depth);  // the chain's step for draft `depth`
    }
    RETURN_IF_ERROR(backend_->TreeStep(parent_states, tokens, positions, mask, options_, share));
    frontier.clear();
    frontier_states.clear();
    for (int64_t r = 0; r < rows; ++r) {
      nodes[expand[r]].state = 1 + stepped + r;  // state 0 is the start's
      frontier.push_back(expand[r]);
      frontier_states.push_back(1 + stepped + r);
    }
    stepped += rows;
  }

  // The tree: a static one keeps every node; a dynamic one its max_nodes most probable (a parent is
  // at least as probable as its child and made before it, so the kept set is closed under parents).
  std::vector<int64_t> kept(nodes.size());
  std::iota(kept.begin(), kept.end(), 0);
  if (shape.dynamic()) {
    std::stable_sort(kept.begin(), kept.end(),
                     [&](int64_t a, int64_t b) { return nodes[a].cumulative > nodes[b].cumulative; });
    kept.resize(std::min<int64_t>(shape.max_nodes, static_cast<int64_t>(kept.size())));
  }
  // Breadth-first: the order made (depth by depth).
  std::sort(kept.begin(), kept.end());
  std::vector<int32_t> row_of(nodes.size(), -1);  // [nodes] verify row, once kept
  for (size_t i = 0; i < kept.size(); ++i) {
    const GrowNode& node = nodes[kept[i]];
    const int32_t parent_row = node.parent < 0 ? 0 : row_of[node.parent];
    if (parent_row < 0) return absl::InternalError("MTP drafter: a kept tree node lost its parent");
    row_of[kept[i]] = static_cast<int32_t>(i + 1);
    draft.tokens.push_back(node.token);
    draft.parents.push_back(parent_row);
    draft.ranks.push_back(node.rank);
    draft.probs.push_back(node.prob);
  }
  if (pick) {  // kept in full: a static tree keeps every node made
    draft.child_distributions.push_back(std::move(root_distribution));
    for (int64_t k : kept) draft.child_distributions.push_back(std::move(distributions[k]));
  }
  return draft;
}

}  // namespace mtpspec
