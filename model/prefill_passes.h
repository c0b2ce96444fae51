// Long calls in passes: Model::Forward over at most kPrefillPassRows rows at a time, so that a long
// prompt holds the activations of one pass rather than of all its rows. Every caller that may run
// a long prompt goes through here: the decoding loop's target, Python's logits and mtp_draft, and
// the CLI's logits.
#pragma once

#include <cstdint>
#include <span>

#include "absl/status/statusor.h"
#include "model/model.h"

namespace mtpspec {

inline constexpr int64_t kPrefillPassRows = 2048;

// Model::Forward of `tokens` at `positions`, in consecutive passes of `pass_rows` rows (the last one
// shorter), each exactly the Forward of its rows on the cache the passes before it filled; the
// passes' logits and hidden states are put together row by row. options.logit_rows index the
// whole call (empty: every row), and the logits come back in their order. A call of at most
// `pass_rows` rows is one Forward. Capturing the indexer's selection (options.capture_topk) needs
// one pass. On an error the cache may hold the passes that ran before it.
absl::StatusOr<ForwardOutput> ForwardInPasses(const Model& model, KvCache& cache, std::span<const int32_t> tokens,
                                              std::span<const int64_t> positions, const ForwardOptions& options,
                                              int64_t pass_rows = kPrefillPassRows);

}  // namespace mtpspec
