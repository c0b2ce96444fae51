// The DSA lightning indexer on the GPU, the twin of attention/indexer.h.
//
// Scores I[r, j] = Σ_h w[r,h] · ReLU(q^I[r,h] · k^I_j · d_I^-½), w = W_wp x · N_I^-½, over the
// indexer key cache, causally (j ≤ positions[r]); then a per-row top-K by radix select (no full sort).
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "attention/indexer.h"
#include "attention/rope_cuda.h"
#include "core/cuda_context.h"
#include "kernels/linear_cuda.h"

namespace mtpspec::cuda {

struct DeviceIndexerWeights {
  DeviceMatrix wq_b;          // [N_I·d_I, r_q]
  DeviceMatrix wk;            // [d_I, H]
  DeviceMatrix weights_proj;  // [N_I, H]
  const float* k_norm_weight = nullptr;  // [d_I]
  const float* k_norm_bias = nullptr;    // [d_I]
};

// The selection of one call, on the device (see TopK in attention/indexer.h).
struct DeviceTopK {
  DeviceArray<int32_t> selected;  // [rows, width]; −1 or future positions must be re-masked by consumers
  int64_t rows = 0, width = 0;
  // Grows `selected` when needed and sets rows/width.
  absl::Status Reshape(int64_t new_rows, int64_t new_width);
};

absl::StatusOr<DeviceIndexerWeights> UploadIndexerWeights(WeightArena& arena, const IndexerWeights& host,
                                                          const std::string& name_prefix);

// Rows are consecutive positions first_position, first_position + 1, ... in every function below
// (what a forward call processes); row r's causal keys are j ≤ first_position + r.

// k^I = RoPE(LayerNorm(W_wk x)) (eps 1e-6, RoPE on the first d_r dims) written to
// index_key_cache rows [first_position, first_position + rows). x: device [rows, H];
// index_key_cache: device [capacity, d_I].
absl::Status IndexerWriteKeysCuda(Context& ctx, const DeviceIndexerWeights& w, const IndexerDims& dims,
                                  const DeviceRope& rope, const float* x, int64_t rows, int64_t first_position,
                                  float* index_key_cache, int64_t capacity);

// scores [rows, num_keys] (device; −∞ where j > first_position + r). x: [rows, H]; q_latent:
// [rows, r_q] the normalised q latent. `scratch` needs IndexerScoresScratchFloats(rows, dims) floats.
int64_t IndexerScoresScratchFloats(int64_t rows, const IndexerDims& dims);
absl::Status IndexerScoresCuda(Context& ctx, const DeviceIndexerWeights& w, const IndexerDims& dims,
                               const DeviceRope& rope, const float* x, const float* q_latent, int64_t rows,
                               int64_t first_position, const float* index_key_cache, int64_t num_keys, float* scratch,
                               float* scores);

// The scoring kernel alone, given rotated queries and head weights (benchmarks, tests).
// q: [rows, N_I, d_I] rotated; head_weights: [rows, N_I] already multiplied by N_I^-½;
// index_key_cache: [≥ num_keys, d_I]. scores: [rows, num_keys]. Each score is
// Σ_h fma(w_h, max((q_h · k_j) · d_I^-½, 0), ·) in head order, as the CPU writes it.
absl::Status IndexerScoreKeys(Context& ctx, const float* q, const float* head_weights, int64_t rows, int64_t n_heads,
                              int64_t head_dim, int64_t first_position, const float* index_key_cache,
                              int64_t num_keys, float* scores);

// Top-min(K, num_keys) per row of scores [rows, num_keys] (device), by radix select (four 8-bit
// passes of histograms, then an ordered compaction; no sort). The output equals the CPU
// SelectTopK's exactly, ties included: larger scores first, equal scores by lower position, and
// each row lists its selection in increasing position; a row with ≤ width causal keys lists keys
// 0 .. width−1. Both sides map floats to the same order-preserving keys (−0 folded into +0), so
// even NaN bit patterns rank alike; scores are not expected to hold NaN.
// `workspace` needs SelectTopKWorkspaceBytes(rows, num_keys) bytes (device).
size_t SelectTopKWorkspaceBytes(int64_t rows, int64_t num_keys);
absl::Status SelectTopKCuda(Context& ctx, const float* scores, int64_t rows, int64_t num_keys, int64_t k,
                            int64_t first_position, void* workspace, DeviceTopK* topk);

// Every causal key: the selection when num_keys ≤ K (row r lists 0 .. num_keys−1).
absl::Status AllCausalKeysCuda(Context& ctx, int64_t rows, int64_t num_keys, DeviceTopK* topk);

}  // namespace mtpspec::cuda
