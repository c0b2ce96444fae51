// Feed-forward blocks on the GPU: the dense SwiGLU MLP and the sigmoid-routed MoE with shared
// experts, twins of model/ffn.h (docs/models.md, "MoE").
//
// Weights are bf16 on the device, or, with an arena of DeviceWeightFormat::kFp8 and an FP8
// checkpoint, FP8 as stored (kernels/fp8_device.h). An MLP's gate and up projections are fused at
// upload into one [2I, H] matrix (gate rows, then up rows; in FP8 each keeps its own scale grid) so
// one GEMV/GEMM computes both.
//
// MoE, decode and verify (rows ≤ kMaxGemvRows): the router runs in fp32 (our own kernel, one fixed
// reduction order per row), a routing kernel picks each row's experts exactly as RouteTokens does,
// a planning kernel groups the (row, expert) pairs by expert, and two grouped kernels run the
// selected experts only — each selected expert's weights are read once for all rows routed to it.
// No host synchronisation. Every (row, output) is reduced in an order that does not depend on the
// other rows, and a row's experts are summed in ascending expert order (as MoeForward does), so a
// row's output is bitwise the same in a block of 1..16 rows as alone.
//
// MoE, prefill (more rows): the same router, then the routing is copied to the host (one
// synchronisation) and each selected expert runs through Linear (cuBLAS above 16 rows) over the
// rows routed to it; results are combined in the same fixed order.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/cuda_context.h"
#include "kernels/linear_cuda.h"
#include "model/config.h"
#include "model/ffn_cuda_launch.h"
#include "model/ffn.h"
#include "model/weights.h"

namespace mtpspec::cuda {

struct DeviceMlpWeights {
  DeviceMatrix gate_up;  // [2I, H]: gate rows then up rows (fused at upload)
  DeviceMatrix down;     // [H, I]
};

struct DeviceMoeWeights {
  DeviceMatrix router;                    // [E, H] bf16 (null when router_f32 is set)
  const float* router_f32 = nullptr;      // [E, H] f32, set instead of `router` when the host router is
                                          // f32 and not exactly bf16 (keeps the router exact)
  const float* router_bias = nullptr;     // [E] e_score_correction_bias (selection only)
  std::vector<DeviceMlpWeights> experts;  // [E]
  std::optional<DeviceMlpWeights> shared;
  // Device tables of the experts' matrices (bf16 pointers or FP8 descriptions), for the grouped kernels.
  launch::ExpertMatrices gate_up_table;  // [E] → [2I, H]
  launch::ExpertMatrices down_table;     // [E] → [H, I]
  int64_t hidden = 0;                                   // H
  int64_t expert_width = 0;                             // I (moe_intermediate_size)
};

// Uploads gate/up (fused) and down: as bf16, or FP8 as stored when the arena's format is kFp8 and
// all three are FP8 with block scales. `name` prefixes errors.
absl::StatusOr<DeviceMlpWeights> UploadMlpWeights(WeightArena& arena, const MlpWeights& host, const std::string& name);
// Uploads the router (bf16, or f32 when the host router is f32 and not exactly bf16), the bias,
// every expert and the shared expert, and builds the pointer tables.
absl::StatusOr<DeviceMoeWeights> UploadMoeWeights(WeightArena& arena, const MoeWeights& host, const ModelConfig& config,
                                                  const std::string& name);

// Twins of MlpForward / MoeForward (model/ffn.h). x, out: device [rows, H]; out must not alias x.
absl::Status MlpForwardCuda(Context& ctx, const DeviceMlpWeights& w, const float* x, int64_t rows, int64_t hidden,
                            float* out);
absl::Status MoeForwardCuda(Context& ctx, const DeviceMoeWeights& w, const ModelConfig& config, const float* x,
                            int64_t rows, float* out);

// The router alone (twin of RouteTokens), copied to the host: for tests and diagnostics.
absl::StatusOr<Routing> RouteTokensCuda(Context& ctx, const DeviceMoeWeights& w, const ModelConfig& config,
                                        const float* x, int64_t rows);

}  // namespace mtpspec::cuda
