#include "attention/tree_mask.h"

#include <bit>

#include "absl/strings/str_cat.h"

namespace mtpspec {

int64_t TreeMask::VisibleCount(int64_t row) const { return first_slot + std::popcount(sees[row]); }

absl::Status TreeMask::Validate(const char* what) const {
  if (sees.size() != slots.size()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": tree mask has ", slots.size(), " slots but ", sees.size(),
                                                   " visibility rows"));
  }
  if (first_slot < 0) return absl::InvalidArgumentError(absl::StrCat(what, ": tree first slot ", first_slot, " < 0"));
  for (int64_t r = 0; r < rows(); ++r) {
    const int64_t offset = slots[r] - first_slot;
    if (offset < 0 || offset >= kMaxSlots) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": tree row ", r, " writes slot ", slots[r], ", outside [",
                                                     first_slot, ", ", first_slot + kMaxSlots, ")"));
    }
    if (r > 0 && slots[r] <= slots[r - 1]) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": tree slots must increase; slots[", r, "] = ", slots[r],
                                                     " after ", slots[r - 1]));
    }
    const uint64_t own = uint64_t{1} << offset;
    if ((sees[r] & own) == 0 || (sees[r] >> offset) != 1) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": tree row ", r,
                                                     " must see its own slot and no slot after it"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<TreeMask> TreeMaskFromParents(int64_t first_slot, std::span<const int32_t> parents) {
  const int64_t rows = static_cast<int64_t>(parents.size());
  if (rows == 0) return absl::InvalidArgumentError("tree: no rows");
  if (rows > TreeMask::kMaxSlots) {
    return absl::InvalidArgumentError(absl::StrCat("tree: ", rows, " rows, more than ", TreeMask::kMaxSlots));
  }
  if (parents[0] != -1) return absl::InvalidArgumentError("tree: parents[0] must be -1 (row 0 is the root)");
  TreeMask mask;
  mask.first_slot = first_slot;
  for (int64_t r = 0; r < rows; ++r) {
    if (r > 0 && (parents[r] < 0 || parents[r] >= r)) {
      return absl::InvalidArgumentError(
          absl::StrCat("tree: parents[", r, "] = ", parents[r], " must name an earlier row in [0, ", r, ")"));
    }
    mask.slots.push_back(first_slot + r);
    mask.sees.push_back((r == 0 ? 0 : mask.sees[parents[r]]) | (uint64_t{1} << r));
  }
  return mask;
}

std::vector<int64_t> TreeDepths(std::span<const int32_t> parents) {
  std::vector<int64_t> depths(parents.size(), 0);  // [rows]
  for (size_t r = 1; r < parents.size(); ++r) depths[r] = depths[parents[r]] + 1;
  return depths;
}

}  // namespace mtpspec
