#include "core/draft_tree.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/limits.h"

namespace mtpspec {

int64_t TreeShape::nodes() const {
  if (dynamic()) return max_nodes;
  int64_t total = 0, width = 1;
  for (int64_t b : branching) {
    // Saturate rather than overflow: the validation reports any total above the limit.
    width = (b > 0 && width > (int64_t{1} << 40) / b) ? (int64_t{1} << 40) : width * b;
    total += width;
    if (total > (int64_t{1} << 40)) return total;
  }
  return total;
}

int64_t TreeShape::depth() const { return dynamic() ? max_nodes : static_cast<int64_t>(branching.size()); }

std::string TreeShape::Name() const {
  if (dynamic()) return absl::StrCat("nodes=", max_nodes);
  return absl::StrJoin(branching, ",");
}

absl::StatusOr<std::vector<int64_t>> ParseTreeBranching(const std::string& text, const std::string& what) {
  std::vector<int64_t> branching;
  for (absl::string_view piece : absl::StrSplit(text, ',')) {
    int64_t b;
    if (!absl::SimpleAtoi(piece, &b)) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " must be a comma-separated list of branch counts such as 3,2,1, got \"", text, "\""));
    }
    branching.push_back(b);
  }
  return branching;
}

absl::Status ValidateTreeShape(const TreeShape& shape, const std::string& what) {
  if (!shape.branching.empty() && shape.max_nodes != 0) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": give either a static tree or a node budget, not both"));
  }
  for (size_t d = 0; d < shape.branching.size(); ++d) {
    if (shape.branching[d] < 1) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": the branch at depth ", d + 1, " is ", shape.branching[d],
                                                     "; every depth needs at least one child per node"));
    }
  }
  if (shape.branching.empty() && shape.max_nodes < 0) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": the node budget must be >= 1, got ", shape.max_nodes));
  }
  if (shape.dynamic() && shape.expand_width < 1) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": the expand width must be >= 1, got ", shape.expand_width));
  }
  if (shape.nodes() > kMaxDraftTokens) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": tree ", shape.Name(), " has ", shape.nodes(), " draft nodes; one verify holds at most ",
        kMaxVerifyRows, " rows (the pending token and ", kMaxDraftTokens,
        " drafts), the limit of the row-invariant kernels and the gather path"));
  }
  return absl::OkStatus();
}

}  // namespace mtpspec
