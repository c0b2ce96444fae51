// The measured side of the batch benchmark (bench/batch_bench.cc): the cost table T(B, L) of batched
// verify forwards with their bounds, and the batched MTP draft and extend costs D(B), X(B).
//
// Costs, for each context N: B caches filled to N with random rows (a forward's cost does not
// depend on their values), and for each B and L = 1 … max_rows rows per sequence the time of one
// Model::ForwardBatch over all B·L rows (median of the repetitions, interleaved), with the
// routed-expert union it read. Its bound: max(bytes / read bandwidth, multiply-adds / MAC rate),
// both measured in the run; bytes = the weights once, the experts of the union, every sequence's
// attended cache rows (at least min(N + L, K) per layer: a lower bound). One batched MTP draft
// step D(B) (B chains' steps and heads in one forward) and one batched extend X(B) of every
// request's committed rows (AL(k_max) rows each, in one forward) are timed on B MTP caches at N, as
// MtpBatchDrafter runs them; x, one request's extend alone, is timed too.
//
// A checkpoint cut to fewer experts than its release (--union-experts E, the release's count): each
// cost also comes at the expert union E experts would give. Rows routing independently touch
// U_E(R) = E·(1 − (1 − k_e/E)^R) experts per MoE layer; the multiply-adds do not change with E, so
// the verify costs at least its measured time plus the bytes of the experts it would touch beyond
// those it read, at the read bandwidth: T_E = T + max(0, moe_layers·U_E(R) − experts read)·expert
// bytes / bandwidth (a lower bound). D(B) and X(B) get the same for the MTP layer's experts.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "bench/batch_schedule.h"
#include "model/model.h"
#include "nlohmann/json.hpp"

namespace mtpspec::bench {

// What a forward would cost at another routed-expert count (--union-experts): see above.
struct UnionCosting {
  int64_t experts = 0;        // E, the release's routed experts
  int64_t own_experts = 0;    // the checkpoint's
  int64_t per_row = 0;        // k_e, experts each row routes to
  int64_t moe_layers = 0;     // trunk MoE layers
  bool mtp_moe = false;       // whether the MTP layer routes too
  double expert_bytes = 0;    // one routed expert's gate + up + down
  double bandwidth = 0;       // bytes/s, the read bandwidth of the run

  static double Union(int64_t experts, int64_t per_row, int64_t rows) {  // U_E(R), one layer
    const double e = static_cast<double>(experts);
    return e * (1.0 - std::pow(1.0 - static_cast<double>(per_row) / e, static_cast<double>(rows)));
  }
  // Seconds the experts beyond `read` (summed over layers) add when `layers` MoE layers route R rows.
  double ExtraSeconds(int64_t layers, int64_t rows, double read) const {
    if (experts == own_experts || per_row == 0) return 0.0;  // the measured union is the answer
    const double at_union = static_cast<double>(layers) * Union(experts, per_row, rows);
    return std::max(0.0, at_union - read) * expert_bytes / bandwidth;
  }
  // The MTP layer's extra seconds for R rows (its union at its own expert count as the measured one).
  double MtpExtraSeconds(int64_t rows) const {
    return mtp_moe ? ExtraSeconds(1, rows, Union(own_experts, per_row, rows)) : 0.0;
  }
};

UnionCosting MakeUnionCosting(const Model& model, int64_t union_experts, double bandwidth);

// The cost table at context n: T(B, L) for every B in `batches` and L = 1 … max_rows, as JSON cells
// (batch, rows_per_sequence, seconds and samples, the experts read, the bound, the costs at the
// union); with prefix_layers > 0, also the forward of the same rows through only that many trunk
// layers and the head (so the rest, divided by their count, is one later layer's cost).
absl::StatusOr<nlohmann::json> MeasureCosts(const Model& model, int64_t n, const std::vector<int64_t>& batches,
                                            int64_t max_rows, int64_t reps, uint64_t seed, double bandwidth,
                                            double mac_rate, const UnionCosting& u, int64_t prefix_layers = 0);

// D(B) and X(B) for every B in `batches` at context n, the extends of `accepted + 1` rows per chain,
// and x, one request's extend alone (see above).
absl::StatusOr<nlohmann::json> MeasureDraftCosts(const Model& model, int64_t n, const std::vector<int64_t>& batches,
                                                 double accepted, int64_t reps, uint64_t seed, const UnionCosting& u);

// The cost table (bench/batch_schedule.h) of a MeasureCosts table and its MeasureDraftCosts, with
// their own costs or those at the union.
BatchCostTable CostTable(const nlohmann::json& costs, const nlohmann::json& draft, bool at_union);

}  // namespace mtpspec::bench
