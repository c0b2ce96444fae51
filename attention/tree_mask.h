// The rows of one attention call laid out as a token tree (speculative tree verify, tree drafting).
//
// Without a tree, the rows of a call are a chain: row r writes cache slot positions[r] and sees
// every slot up to its own. With a TreeMask, row r writes slot `slots[r]` (its RoPE position stays
// positions[r], the node's depth below the committed context) and sees:
//   every slot before `first_slot` (the committed context), and
//   the slots first_slot + i whose bit i is set in `sees[r]` (its ancestors and itself).
// The slots of one row's ancestors come before its own, so a node's visible keys are listed in the
// same order as those of the chain of its path, and it attends to them exactly as that chain would.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace mtpspec {

struct TreeMask {
  // A tree's new slots are offsets 0 … kMaxSlots − 1 from first_slot (one bit each in `sees`).
  static constexpr int64_t kMaxSlots = 64;

  int64_t first_slot = 0;       // slots before it are committed context, visible to every row
  std::vector<int64_t> slots;   // [rows] the cache slot each row writes, increasing, ≥ first_slot
  std::vector<uint64_t> sees;   // [rows] bit i: slot first_slot + i is visible (its own slot included)

  int64_t rows() const { return static_cast<int64_t>(slots.size()); }
  // T: the slots a call must hold, up to the highest slot written.
  int64_t num_slots() const { return slots.empty() ? first_slot : slots.back() + 1; }
  bool Visible(int64_t row, int64_t slot) const {
    if (slot < first_slot) return true;
    const int64_t offset = slot - first_slot;
    return offset < kMaxSlots && ((sees[row] >> offset) & 1u) != 0;
  }
  // Keys row `row` sees: the committed context plus its own tree slots.
  int64_t VisibleCount(int64_t row) const;

  // Checks the invariants above (own slot visible, nothing visible after it, slots increasing and
  // within kMaxSlots of first_slot); `what` names the caller in the error.
  absl::Status Validate(const char* what) const;
};

// A tree verify's mask: row r at slot first_slot + r, a child of row parents[r] (parents[0] = −1:
// row 0 is the root; parents[r] < r otherwise).
absl::StatusOr<TreeMask> TreeMaskFromParents(int64_t first_slot, std::span<const int32_t> parents);

// Depth of each row below the root (the root has depth 0), for parents as above. [rows]
std::vector<int64_t> TreeDepths(std::span<const int32_t> parents);

}  // namespace mtpspec
