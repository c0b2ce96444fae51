// Verify-cost measurement for the trade-off benchmark (anchors §5): on a cache filled to N, the
// time of a forward over L rows at positions N … N+L−1 on a chosen attention path (with its
// per-component split), the bytes such a forward must read, and the MTP draft-step time.
//
// Each measurement runs the rows and truncates the cache back to N, so one fill serves all of them.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/profile.h"
#include "mtp/mtp_module.h"
#include "model/model.h"
#include "nlohmann/json.hpp"

namespace mtpspec::bench {

inline constexpr int kComponents = static_cast<int>(Component::kCount);

// Timings of one (path, L) point: one entry per repetition.
struct CostSamples {
  std::vector<double> seconds;                                // [reps] wall time of the forward
  std::vector<std::array<double, kComponents>> components;    // [reps] ForwardProfile split
  double MedianSeconds() const;
  std::array<double, kComponents> MedianComponents() const;  // component-wise medians
};

// Runs tokens (L rows) at positions n … n+L−1 with `path` forced, logits for every row (as a verify
// does), then truncates back to n. Adds one sample. `topk_out` (may be null) receives the selection
// of every layer.
absl::Status TimedVerify(const Model& model, KvCache& cache, std::span<const int32_t> tokens, int64_t n,
                         AttentionPath path, CostSamples* samples, std::vector<TopK>* topk_out = nullptr);

// Distinct latent rows the L rows attend on each layer (union of their selections, causal keys
// only), summed over layers. topk: [layers] as captured by TimedVerify.
int64_t AttendedRowsUnion(const std::vector<TopK>& topk, int64_t n, int64_t rows);

// Routed experts touched by the first L rows (L = 1 … rows) of a forward at positions n …, summed
// over MoE layers: out[L−1]. Runs the layers from their public building blocks (as
// decode_breakdown does) so that the router input is visible; truncates back to n.
absl::StatusOr<std::vector<int64_t>> RoutedExpertsTouched(const Model& model, KvCache& cache,
                                                          std::span<const int32_t> tokens, int64_t n);

// Bytes a verify of L rows at context n must read (each byte once).
struct VerifyBytes {
  int64_t dense_weights = 0;     // everything but routed experts (indexer scoring where it runs)
  double routed_expected = 0;    // E·(1−(1−k_e/E)^L) experts per MoE layer × expert bytes
  int64_t routed_actual = -1;    // experts actually routed × expert bytes (−1: not measured)
  int64_t kv_latent = 0;         // attended latent + rope rows (f32)
  int64_t kv_indexer = 0;        // indexer keys of all T keys on full layers (when scoring runs)
  double Total(bool actual_routing) const;
};
VerifyBytes ComputeVerifyBytes(const Model& model, int64_t n, int64_t rows, bool scoring, int64_t attended_rows,
                               int64_t routed_experts_touched);

// Multiply-adds one verify row does at context n (all rows do the same work): every weight it
// reads (DecodeStepTraffic: dense weights, k_e routed experts, the head), absorbed MLA over
// min(n + 1, K) keys per layer (q absorption, scores, combine, un-absorption), and indexer scoring
// of all n + 1 keys on full layers when `scoring`. A row beyond the first reads no new dense
// weights, but it still does these multiply-adds.
double VerifyRowMacs(const Model& model, int64_t n, bool scoring);

// Bytes of one routed expert (gate + up + down) and the number of MoE layers in the trunk.
int64_t ExpertBytes(const Model& model);
int64_t MoeLayerCount(const Model& model);

// Fills an MTP cache with the pairs (hidden[t], tokens[t+1]) for t = 0 … n−2, in chunks.
// hidden: [n, H] the target's hidden states (post- or pre-norm as the drafter uses).
absl::Status FillMtpCache(const MtpModule& mtp, KvCache& cache, const float* hidden, std::span<const int32_t> tokens,
                          int64_t n, int64_t chunk, const MtpOptions& options);

// One chained draft step at position n−1 (the pair (hidden_row, token)), timed, then truncated back.
absl::Status TimedMtpStep(const MtpModule& mtp, KvCache& cache, const float* hidden_row, int32_t token, int64_t n,
                          const MtpOptions& options, CostSamples* samples);

// The MTP drafter's per-cycle work besides its chained steps, timed: the extend (no head) over
// `rows` committed pairs at positions n−rows … n−1, the last being (h_{n−1}, token) (what
// MtpDrafter::Observe runs after a cycle that accepted rows − 1 drafts), and the head on the newest
// row (the first draft, at the start of Propose). The cache must hold n − 1 pairs; it is truncated
// back to them. hidden: [n, H]; tokens: the prompt (tokens[t + 1] follows hidden row t).
absl::Status TimedMtpExtend(const MtpModule& mtp, KvCache& cache, const float* hidden, std::span<const int32_t> tokens,
                            int32_t token, int64_t n, int64_t rows, const MtpOptions& options, CostSamples* extend,
                            CostSamples* head);

// Multiply-add rate (MACs/s) of the project's Linear on cache-resident bf16 weights with 8 rows,
// where it is compute-bound: the rate at which a verify's extra rows can be computed. Median of
// `reps` timings; {"macs_per_second", "samples", "threads", "kernel"}.
nlohmann::json MeasureMacRate(int reps);

nlohmann::json ComponentsJson(const std::array<double, kComponents>& seconds);

}  // namespace mtpspec::bench
