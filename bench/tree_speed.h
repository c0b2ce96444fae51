// Measured tree and chain decoding on the bench model, with SYNTHETIC acceptance at a trained
// model's rates: the bench model's random weights accept nothing, so each configuration accepts by
// the table of conditional rates (by depth and sibling rank) that the trained model showed for the
// same shape (verify/tree_acceptance.h, AcceptTreeSynthetic; the chain rule for chains). The
// timings are those of real cycles: the MTP drafter grows the tree, the target verifies it in one
// forward under its tree mask, keeps the path and the drafter extends over it. What this measures
// is the cost side at the bench model's proportions, with the accepted lengths of the trained one.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/draft_tree.h"
#include "model/model.h"
#include "nlohmann/json.hpp"

namespace mtpspec::bench {

struct TreeSpeedConfig {
  std::string kind;   // "chain" or "static"
  std::string shape;  // "k=3", "3,1,1"
  int64_t rows = 0;   // verify rows L: the pending token and the drafts
  int64_t k = 0;      // chain drafts (0 for a tree)
  TreeShape tree;     // the tree (empty for a chain)
  // [depth][rank] conditional acceptance (AcceptParams::synthetic_tree_rates); a chain's rank-0
  // column is its synthetic_rates.
  std::vector<std::vector<double>> rates;
  double source_acceptance_length = 0;  // the trained model's AL for this shape
};

// From a tree report run (bench/report/tree_report.py's JSON, whose results carry
// "synthetic_tree_rates"): for each L in `rows`, the chain of L − 1 drafts and the static tree of
// L − 1 nodes with the highest accepted length, in the results of `mode` ("T = 0.0").
absl::StatusOr<std::vector<TreeSpeedConfig>> TreeSpeedConfigsFromReport(const std::string& path, const std::string& mode,
                                                                        const std::vector<int64_t>& rows);

struct TreeSpeedSettings {
  int64_t new_tokens = 96;
  int64_t reps = 3;            // interleaved repetitions of every configuration (plain twice: A/A)
  int64_t fill_chunk = 512;
  double temperature = 1.0;    // the target's draws (varied tokens and routing, as real text has)
  uint64_t seed = 7;
};

// Fills a prefix-replaying target with `prompt` (N tokens) and times plain decoding, its A/A repeat
// and every configuration, interleaved. JSON: per configuration its steady-state tokens/s, speedup
// over plain, accepted length measured here, the frontier widths drafted and the time split.
absl::StatusOr<nlohmann::json> MeasureTreeSpeed(const Model& model, const std::vector<int32_t>& prompt,
                                                const std::vector<TreeSpeedConfig>& configs,
                                                const TreeSpeedSettings& settings);

}  // namespace mtpspec::bench
