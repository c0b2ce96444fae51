// Multi-head latent attention with DSA sparse selection on the GPU, the twin of attention/mla.h.
//
// Same three paths, same choice rule (kAuto: dense when T ≤ K; gather when rows ≤ gather_max_rows
// and T > K; else mask), same IndexShare contract. The gather path (decode and verify, L ≤ 16) is
// our own kernel in the absorbed form and computes each query row the same way whatever L is.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "attention/indexer_cuda.h"
#include "attention/kv_cache_cuda.h"
#include "attention/mla.h"
#include "attention/rope_cuda.h"
#include "core/cuda_context.h"
#include "kernels/linear_cuda.h"

namespace mtpspec::cuda {

struct DeviceMlaWeights {
  DeviceMatrix q_a_proj;   // [r_q, H]
  DeviceMatrix q_b_proj;   // [N_h·(d_n+d_r), r_q]
  DeviceMatrix kv_a_proj;  // [r_kv + d_r, H]
  DeviceMatrix kv_b_proj;  // [N_h·(d_n+d_v), r_kv]
  DeviceMatrix o_proj;     // [H, N_h·d_v]
  const float* q_a_norm = nullptr;   // [r_q]
  const float* kv_a_norm = nullptr;  // [r_kv]
  std::optional<DeviceIndexerWeights> indexer;  // full layers only
};

absl::StatusOr<DeviceMlaWeights> UploadMlaWeights(WeightArena& arena, const MlaWeights& host,
                                                  const std::string& name_prefix);

// The CUDA twin of MlaForward: same semantics, options and IndexShare contract (a full layer writes
// *topk, a shared layer reads it). x, out: device [rows, H]. positions: HOST array [rows]
// (consecutive). The cache's capacity bounds the positions. Returns the path used.
absl::StatusOr<AttentionPath> MlaForwardCuda(Context& ctx, const DeviceMlaWeights& w, const MlaDims& dims,
                                             const DeviceRope& rope, const float* x, int64_t rows,
                                             const int64_t* positions, DeviceKvCache& cache, int64_t layer,
                                             const AttentionOptions& options, DeviceTopK* topk, float* out);

}  // namespace mtpspec::cuda
