// Plain launch functions of model/ffn_cuda.cu (shared with nvcc; no absl). Each returns the
// launch's cudaError_t; cudaErrorInvalidValue for shapes the kernels do not support.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "core/limits.h"
#include "kernels/fp8_device.h"
#include "model/routing_rule.h"

namespace mtpspec::cuda::launch {

// Rows per group of the grouped expert kernels (the small-row GEMV's limit).
inline constexpr int kMoeMaxGroupRows = static_cast<int>(kMaxVerifyRows);  // core/limits.h

// The routed experts' matrices of one projection, on the device, for the grouped kernels: bf16
// matrices or FP8 ones (exactly one table set). A gate/up matrix is [2I, H] (gate rows, then up
// rows; FP8 with scale_split = I), a down matrix [H, I].
struct ExpertMatrices {
  const __nv_bfloat16* const* bf16 = nullptr;  // [E] → the expert's matrix
  const Fp8Weights* fp8 = nullptr;             // [E]
};

// logits[rows, E] = x[rows, H] · router[E, H]ᵀ in fp32. Exactly one of router_bf16 / router_f32
// is non-null. Every (row, expert) is reduced in one fixed order, for any row count.
cudaError_t MoeRouterLogits(const float* x, int64_t rows, const __nv_bfloat16* router_bf16, const float* router_f32,
                            int64_t experts, int64_t hidden, float* logits, cudaStream_t stream);

// The routing rule the kernel applies (model/routing_rule.h, shared with the CPU).
using MoeRouteParams = RoutingRule;

// RouteTokens on the device: sigmoid scores, bias for selection only, group-limited top-k, ties to
// the lower index. logits: [rows, E]; bias: [E]; expert, weight: [rows, k] in rank order.
cudaError_t MoeRoute(const float* logits, const float* bias, int64_t rows, const MoeRouteParams& params,
                     int32_t* expert, float* weight, cudaStream_t stream);

// Groups the rows·k (row, expert) pairs of ≤ 16 rows by expert, in one block. Pairs are sorted by
// (expert, row); pair i of that order is row pair_row[i]. Slot s (experts in ascending order) holds
// the pairs [slot_start[s], slot_start[s] + slot_count[s]) of expert slot_expert[s]; *num_slots
// slots are used (at most min(E, rows·k)). combine_index / combine_weight [rows, k]: for each row,
// its pairs' sorted positions and weights with its experts in ascending order.
cudaError_t MoePlan(const int32_t* expert, const float* weight, int64_t rows, int64_t k, int32_t* pair_row,
                    int32_t* slot_expert, int32_t* slot_start, int32_t* slot_count, int32_t* num_slots,
                    int32_t* combine_index, float* combine_weight, cudaStream_t stream);

// For every used slot s (grid over max_slots slots; unused ones exit): with W = expert e's gate/up,
// [2I, H], and x the slot's rows, act[slot_start[s] + j, o] = silu(x_j · W[o]) · (x_j · W[I + o]),
// o < I. act: [pairs, I].
cudaError_t MoeGroupedGateUp(const float* x, int64_t hidden, int64_t width, const ExpertMatrices& gate_up_table,
                             const int32_t* pair_row, const int32_t* slot_expert, const int32_t* slot_start,
                             const int32_t* slot_count, const int32_t* num_slots, int64_t max_slots, float* act,
                             cudaStream_t stream);

// y[slot_start[s] + j, h] = act[slot_start[s] + j] · (expert e's down)[h], h < H. y: [pairs, H].
cudaError_t MoeGroupedDown(const float* act, int64_t hidden, int64_t width, const ExpertMatrices& down_table,
                           const int32_t* slot_expert, const int32_t* slot_start, const int32_t* slot_count,
                           const int32_t* num_slots, int64_t max_slots, float* y, cudaStream_t stream);

// dst[i, :] = src[index[i], :], i < n. src, dst: [*, cols].
cudaError_t GatherRows(const float* src, const int32_t* index, int64_t n, int64_t cols, float* dst,
                       cudaStream_t stream);

// out[r, h] = (accumulate ? out[r, h] : 0) + Σ_m combine_weight[r, m] · y[combine_index[r, m], h],
// m = 0..k−1 in order (one fused multiply-add per term).
cudaError_t MoeCombine(const float* y, const int32_t* combine_index, const float* combine_weight, int64_t rows,
                       int64_t k, int64_t hidden, bool accumulate, float* out, cudaStream_t stream);

}  // namespace mtpspec::cuda::launch
