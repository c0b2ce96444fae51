// The one row limit of the speculative verify path, and the draft length it allows.
//
// Up to kMaxVerifyRows query rows, every kernel (Linear, the norms, attention's gather path, the
// MoE, and their CUDA twins) computes a row exactly as it would compute that row alone, and MLA's
// automatic path choice takes the gather path once T > index_topk. A verify block is the pending
// token plus k drafts, so k ≤ kMaxDraftTokens keeps speculative output bit-identical to plain
// decoding on every device. Everything that bounds k or the verify rows reads these constants.
#pragma once

#include <cstdint>

namespace mtpspec {

inline constexpr int64_t kMaxVerifyRows = 16;
inline constexpr int64_t kMaxDraftTokens = kMaxVerifyRows - 1;
// The largest k that `k = auto` explores unless told otherwise.
inline constexpr int64_t kDefaultAdaptiveKMax = 8;

}  // namespace mtpspec
