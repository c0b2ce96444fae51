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
#include "core/linear_cuda.h"

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

// k^I = RoPE(LayerNorm(W_wk x)) written to index_key_cache[positions[r]]. x: device [rows, H];
// positions: HOST [rows]; positions_device: the same as int32 on the device.
absl::Status IndexerWriteKeysCuda(Context& ctx, const DeviceIndexerWeights& w, const IndexerDims& dims, int64_t hidden,
                                  const DeviceRope& rope, const float* x, int64_t rows, const int64_t* positions,
                                  const int32_t* positions_device, float* index_key_cache);

// scores [rows, num_keys] (device, −∞ where j > positions[r]). x: [rows, H]; q_latent: [rows, r_q];
// positions: HOST [rows] (consecutive are not required here).
absl::Status IndexerScoresCuda(Context& ctx, const DeviceIndexerWeights& w, const IndexerDims& dims, int64_t hidden,
                               int64_t q_lora, const DeviceRope& rope, const float* x, const float* q_latent,
                               int64_t rows, const int64_t* positions, const float* index_key_cache, int64_t num_keys,
                               float* scores);

// The scoring kernel alone, given the rotated queries and head weights (benchmarks, tests).
// q: [rows, N_I, d_I] rotated; head_weights: [rows, N_I] (already · N_I^-½); positions_device:
// int32 [rows]. scores: [rows, num_keys].
absl::Status IndexerScoreKeys(Context& ctx, const float* q, const float* head_weights, int64_t rows, int64_t n_heads,
                              int64_t head_dim, const int32_t* positions_device, const float* index_key_cache,
                              int64_t num_keys, float* scores);

// Top-min(K, num_keys) per row of scores [rows, num_keys] (device), by radix select. Writes
// topk->selected [rows, width]. The set equals the CPU SelectTopK's; within a row the order is by
// position among the strictly-greater keys, then the tied keys of the threshold value in position
// order (earliest first), which is also the CPU's tie rule (see indexer_cuda.cc).
absl::Status SelectTopKCuda(Context& ctx, const float* scores, int64_t rows, int64_t num_keys, int64_t k,
                            DeviceTopK* topk);

// Every causal key: the selection when num_keys ≤ K. positions: HOST [rows].
absl::Status AllCausalKeysCuda(Context& ctx, int64_t rows, int64_t num_keys, const int64_t* positions,
                               DeviceTopK* topk);

}  // namespace mtpspec::cuda
