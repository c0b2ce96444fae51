// Kernels of model/ffn_cuda: the fp32 router, the routing decision, the grouping of (row, expert)
// pairs, the grouped expert GEMVs and the weighted combination.
//
// The grouped GEMVs follow kernels/linear_cuda.cu's layout: a block of kWarps warps owns kWarps
// consecutive weight rows (one per warp); the input dimension is walked in tiles of 32 lanes × 8
// values (bf16, or FP8 widened with its block scale), each tile of the (up to 16) input rows is
// staged in shared memory, and every lane keeps a partial sum per input row, reduced at the end by
// a fixed xor-shuffle tree. The operations behind one (input row, output) never depend on how many
// other rows the group holds.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math_constants.h>

#include <cstdint>

#include "kernels/gemv_lane.cuh"
#include "model/ffn_cuda_launch.h"

namespace mtpspec::cuda::launch {
namespace {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kLaneValues = kGemvLaneValues;
constexpr int kTile = 32 * kLaneValues;  // input values per tile
constexpr int kGroupRows = kMoeMaxGroupRows;

// The shared core of the grouped GEMVs. Every thread of the block calls it (it synchronises).
// x_rows: shared [kGroupRows] pointers to the n input rows (each [in]); the warp's kW weight rows
// are w_rows[0 .. kW) (each [in]: a bf16 or f32 pointer, or an Fp8Row); when `active` is false
// the warp only helps staging.
// On return, lane 0 (and every lane) holds sum[w][r] = x_rows[r] · w_rows[w] for r < n.
template <typename RowT, int kW>
__device__ void GroupDot(const float* const* x_rows, int n, int64_t in, const RowT (&w_rows)[kW],
                         bool active, bool vector_loads, float (*x_tile)[kTile], float (&sum)[kW][kGroupRows]) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int w = 0; w < kW; ++w) {
#pragma unroll
    for (int r = 0; r < kGroupRows; ++r) sum[w][r] = 0.0f;
  }
  for (int64_t base = 0; base < in; base += kTile) {
    // Stage x[:, base .. base + kTile) for the n rows (zero elsewhere).
    for (int t = threadIdx.x; t < kGroupRows * kTile; t += blockDim.x) {
      const int r = t / kTile;
      const int c = t % kTile;
      const int64_t i = base + c;
      x_tile[r][c] = (r < n && i < in) ? x_rows[r][i] : 0.0f;
    }
    __syncthreads();
    if (active) {
      const int64_t i0 = base + lane * kLaneValues;
#pragma unroll
      for (int w = 0; w < kW; ++w) {
        float wv[kLaneValues];
        LoadLaneWeights(w_rows[w], i0, in, vector_loads, wv);
#pragma unroll
        for (int r = 0; r < kGroupRows; ++r) {
          if (r < n) {
#pragma unroll
            for (int j = 0; j < kLaneValues; ++j) sum[w][r] = fmaf(wv[j], x_tile[r][lane * kLaneValues + j], sum[w][r]);
          }
        }
      }
    }
    __syncthreads();
  }
  if (!active) return;
#pragma unroll
  for (int w = 0; w < kW; ++w) {
#pragma unroll
    for (int r = 0; r < kGroupRows; ++r) {
      float v = sum[w][r];
#pragma unroll
      for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
      sum[w][r] = v;
    }
  }
}

__device__ inline bool Aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }
__device__ inline bool Aligned8(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 7u) == 0; }

// The weight rows o and (for gate/up) width + o of the slot's expert, and whether they allow vector
// loads, from a bf16 table or an FP8 one.
template <bool kFp8>
struct ExpertRows;

template <>
struct ExpertRows<false> {
  using Row = const __nv_bfloat16*;
  const __nv_bfloat16* w;  // [rows, in]
  __device__ ExpertRows(const ExpertMatrices& table, int32_t expert) : w(table.bf16[expert]) {}
  __device__ Row operator()(int64_t o, int64_t in) const { return w + o * in; }
  __device__ bool VectorLoads(int64_t in) const { return (in % kLaneValues) == 0 && Aligned16(w); }
};

template <>
struct ExpertRows<true> {
  using Row = Fp8Row;
  Fp8Weights w;
  __device__ ExpertRows(const ExpertMatrices& table, int32_t expert) : w(table.fp8[expert]) {}
  __device__ Row operator()(int64_t o, int64_t in) const { return RowOf(w, o, in); }
  __device__ bool VectorLoads(int64_t in) const { return (in % kLaneValues) == 0 && Aligned8(w.bytes); }
};

// grid (ceil(E / kWarps), ceil(rows / 16)); warp → expert, blockIdx.y → a group of ≤ 16 rows.
template <typename WeightT>
__global__ void RouterLogitsKernel(const float* __restrict__ x, int64_t rows, const WeightT* __restrict__ router,
                                   int64_t experts, int64_t hidden, float* __restrict__ logits) {
  __shared__ float x_tile[kGroupRows][kTile];  // [16, kTile]
  __shared__ const float* x_rows[kGroupRows];  // [16]
  const int64_t row0 = static_cast<int64_t>(blockIdx.y) * kGroupRows;
  const int n = static_cast<int>(rows - row0 < kGroupRows ? rows - row0 : kGroupRows);
  if (threadIdx.x < kGroupRows) x_rows[threadIdx.x] = threadIdx.x < n ? x + (row0 + threadIdx.x) * hidden : nullptr;
  __syncthreads();
  const int warp = threadIdx.x >> 5;
  const int64_t e = static_cast<int64_t>(blockIdx.x) * kWarps + warp;
  const bool active = e < experts;
  const WeightT* const w_rows[1] = {router + (active ? e : 0) * hidden};
  const bool vector_loads = (hidden % kLaneValues) == 0 && Aligned16(router);
  float sum[1][kGroupRows];
  GroupDot<const WeightT*, 1>(x_rows, n, hidden, w_rows, active, vector_loads, x_tile, sum);
  if (!active || (threadIdx.x & 31) != 0) return;
#pragma unroll
  for (int r = 0; r < kGroupRows; ++r) {
    if (r < n) logits[(row0 + r) * experts + e] = sum[0][r];
  }
}

// One block per row. Threads compute the scores; thread 0 then applies the routing rule
// (SelectExperts, model/routing_rule.h), the same code RouteTokens runs on the CPU.
// Dynamic shared memory: sigma [E], choice [E] (floats), group_score [G] (floats), taken [E] and
// keep_group [G] (ints).
__global__ void RouteKernel(const float* __restrict__ logits, const float* __restrict__ bias, MoeRouteParams p,
                            int32_t* __restrict__ expert, float* __restrict__ weight) {
  extern __shared__ float route_smem[];
  const int64_t num_experts = p.experts;
  const int64_t groups = p.n_group;
  float* sigma = route_smem;                                               // [E]
  float* choice = sigma + num_experts;                                     // [E]
  float* group_score = choice + num_experts;                               // [G]
  int* taken = reinterpret_cast<int*>(group_score + groups);               // [E]
  int* keep_group = taken + num_experts;                                   // [G]
  const int64_t r = blockIdx.x;
  const float* row_logits = logits + r * num_experts;  // [E]
  for (int64_t e = threadIdx.x; e < num_experts; e += blockDim.x) {
    sigma[e] = 1.0f / (1.0f + expf(-row_logits[e]));
    choice[e] = sigma[e] + bias[e];
  }
  __syncthreads();
  if (threadIdx.x != 0) return;
  SelectExperts(p, sigma, choice, group_score, keep_group, taken, expert + r * p.top_k, weight + r * p.top_k);
}

// One block. Dynamic shared memory: sorted [P] ints (P = rows · k), sorted[i] = the pair of rank i.
__global__ void PlanKernel(const int32_t* __restrict__ expert, const float* __restrict__ weight, int64_t rows,
                           int64_t k, int32_t* __restrict__ pair_row, int32_t* __restrict__ slot_expert,
                           int32_t* __restrict__ slot_start, int32_t* __restrict__ slot_count,
                           int32_t* __restrict__ num_slots, int32_t* __restrict__ combine_index,
                           float* __restrict__ combine_weight) {
  extern __shared__ int32_t sorted[];  // [P]
  const int64_t pairs = rows * k;
  // Rank of pair p = (row r, rank j) in the (expert, row) order, and the rank m of its expert
  // among its row's experts. A row's experts are distinct, so both ranks are unique.
  for (int64_t p = threadIdx.x; p < pairs; p += blockDim.x) {
    const int32_t e = expert[p];
    const int64_t r = p / k;
    int64_t rank = 0;
    for (int64_t q = 0; q < pairs; ++q) {
      const int32_t eq = expert[q];
      if (eq < e || (eq == e && q / k < r)) ++rank;
    }
    sorted[rank] = static_cast<int32_t>(p);
    int64_t m = 0;
    for (int64_t j = 0; j < k; ++j) {
      if (expert[r * k + j] < e) ++m;
    }
    combine_index[r * k + m] = static_cast<int32_t>(rank);
    combine_weight[r * k + m] = weight[p];
  }
  __syncthreads();
  for (int64_t i = threadIdx.x; i < pairs; i += blockDim.x) {
    const int32_t p = sorted[i];
    const int32_t e = expert[p];
    pair_row[i] = static_cast<int32_t>(p / k);
    const bool starts_slot = i == 0 || expert[sorted[i - 1]] != e;
    if (starts_slot) {
      int32_t slot = 0;  // distinct experts before rank i
      for (int64_t j = 1; j <= i; ++j) {
        if (expert[sorted[j]] != expert[sorted[j - 1]]) ++slot;
      }
      int64_t end = i;
      while (end + 1 < pairs && expert[sorted[end + 1]] == e) ++end;
      slot_expert[slot] = e;
      slot_start[slot] = static_cast<int32_t>(i);
      slot_count[slot] = static_cast<int32_t>(end - i + 1);
      if (end == pairs - 1) *num_slots = slot + 1;
    }
  }
}

__device__ inline float Silu(float v) { return v / (1.0f + expf(-v)); }

// grid (ceil(I / kWarps), max_slots); warp → output o of the slot's expert: gate row o and up row I + o.
template <bool kFp8>
__global__ void GroupedGateUpKernel(const float* __restrict__ x, int64_t hidden, int64_t width,
                                    ExpertMatrices gate_up_table,
                                    const int32_t* __restrict__ pair_row, const int32_t* __restrict__ slot_expert,
                                    const int32_t* __restrict__ slot_start, const int32_t* __restrict__ slot_count,
                                    const int32_t* __restrict__ num_slots, float* __restrict__ act) {
  __shared__ float x_tile[kGroupRows][kTile];  // [16, kTile]
  __shared__ const float* x_rows[kGroupRows];  // [16]
  const int slot = blockIdx.y;
  if (slot >= *num_slots) return;  // the whole block leaves together
  const int32_t start = slot_start[slot];
  const int n = slot_count[slot];  // 1..16 (checked by the plan)
  if (threadIdx.x < kGroupRows) {
    x_rows[threadIdx.x] = threadIdx.x < n ? x + static_cast<int64_t>(pair_row[start + threadIdx.x]) * hidden : nullptr;
  }
  __syncthreads();
  const ExpertRows<kFp8> w(gate_up_table, slot_expert[slot]);  // [2I, H]
  const int warp = threadIdx.x >> 5;
  const int64_t o = static_cast<int64_t>(blockIdx.x) * kWarps + warp;
  const bool active = o < width;
  const int64_t safe_o = active ? o : 0;
  using Row = typename ExpertRows<kFp8>::Row;
  const Row w_rows[2] = {w(safe_o, hidden), w(width + safe_o, hidden)};
  float sum[2][kGroupRows];
  GroupDot<Row, 2>(x_rows, n, hidden, w_rows, active, w.VectorLoads(hidden), x_tile, sum);
  if (!active || (threadIdx.x & 31) != 0) return;
#pragma unroll
  for (int r = 0; r < kGroupRows; ++r) {
    if (r < n) act[(static_cast<int64_t>(start) + r) * width + o] = Silu(sum[0][r]) * sum[1][r];
  }
}

// grid (ceil(H / kWarps), max_slots); warp → output h of the slot's expert's down projection.
template <bool kFp8>
__global__ void GroupedDownKernel(const float* __restrict__ act, int64_t hidden, int64_t width,
                                  ExpertMatrices down_table,
                                  const int32_t* __restrict__ slot_expert, const int32_t* __restrict__ slot_start,
                                  const int32_t* __restrict__ slot_count, const int32_t* __restrict__ num_slots,
                                  float* __restrict__ y) {
  __shared__ float x_tile[kGroupRows][kTile];  // [16, kTile]
  __shared__ const float* x_rows[kGroupRows];  // [16]
  const int slot = blockIdx.y;
  if (slot >= *num_slots) return;
  const int32_t start = slot_start[slot];
  const int n = slot_count[slot];
  if (threadIdx.x < kGroupRows) {
    x_rows[threadIdx.x] = threadIdx.x < n ? act + (static_cast<int64_t>(start) + threadIdx.x) * width : nullptr;
  }
  __syncthreads();
  const ExpertRows<kFp8> w(down_table, slot_expert[slot]);  // [H, I]
  const int warp = threadIdx.x >> 5;
  const int64_t h = static_cast<int64_t>(blockIdx.x) * kWarps + warp;
  const bool active = h < hidden;
  using Row = typename ExpertRows<kFp8>::Row;
  const Row w_rows[1] = {w(active ? h : 0, width)};
  float sum[1][kGroupRows];
  GroupDot<Row, 1>(x_rows, n, width, w_rows, active, w.VectorLoads(width), x_tile, sum);
  if (!active || (threadIdx.x & 31) != 0) return;
#pragma unroll
  for (int r = 0; r < kGroupRows; ++r) {
    if (r < n) y[(static_cast<int64_t>(start) + r) * hidden + h] = sum[0][r];
  }
}

__global__ void GatherRowsKernel(const float* __restrict__ src, const int32_t* __restrict__ index, int64_t cols,
                                 float* __restrict__ dst) {
  const int64_t i = blockIdx.x;
  const float* from = src + static_cast<int64_t>(index[i]) * cols;  // [cols]
  float* to = dst + i * cols;                                       // [cols]
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) to[c] = from[c];
}

// One block per row.
__global__ void CombineKernel(const float* __restrict__ y, const int32_t* __restrict__ combine_index,
                              const float* __restrict__ combine_weight, int64_t k, int64_t hidden, bool accumulate,
                              float* __restrict__ out) {
  const int64_t r = blockIdx.x;
  float* out_row = out + r * hidden;  // [H]
  for (int64_t h = threadIdx.x; h < hidden; h += blockDim.x) {
    float acc = accumulate ? out_row[h] : 0.0f;
    for (int64_t m = 0; m < k; ++m) {
      const int64_t source = combine_index[r * k + m];
      acc = fmaf(combine_weight[r * k + m], y[source * hidden + h], acc);
    }
    out_row[h] = acc;
  }
}

constexpr int64_t kMaxGridY = 65535;

}  // namespace

cudaError_t MoeRouterLogits(const float* x, int64_t rows, const __nv_bfloat16* router_bf16, const float* router_f32,
                            int64_t experts, int64_t hidden, float* logits, cudaStream_t stream) {
  if (rows < 0 || experts < 1 || hidden < 1 || ((router_bf16 == nullptr) == (router_f32 == nullptr))) {
    return cudaErrorInvalidValue;
  }
  if (rows == 0) return cudaSuccess;
  const int64_t groups = (rows + kGroupRows - 1) / kGroupRows;
  if (groups > kMaxGridY) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>((experts + kWarps - 1) / kWarps), static_cast<unsigned>(groups));
  if (router_bf16 != nullptr) {
    RouterLogitsKernel<__nv_bfloat16><<<grid, kThreads, 0, stream>>>(x, rows, router_bf16, experts, hidden, logits);
  } else {
    RouterLogitsKernel<float><<<grid, kThreads, 0, stream>>>(x, rows, router_f32, experts, hidden, logits);
  }
  return cudaGetLastError();
}

cudaError_t MoeRoute(const float* logits, const float* bias, int64_t rows, const MoeRouteParams& params,
                     int32_t* expert, float* weight, cudaStream_t stream) {
  if (rows < 0 || params.experts < 1 || params.top_k < 1 || params.top_k > params.experts || params.n_group < 1 ||
      params.experts % params.n_group != 0 || params.topk_group < 1 || params.topk_group > params.n_group) {
    return cudaErrorInvalidValue;
  }
  if (rows == 0) return cudaSuccess;
  const size_t shared = static_cast<size_t>(3 * params.experts + 2 * params.n_group) * sizeof(float);
  if (shared > 48 * 1024 || rows > 0x7fffffff) return cudaErrorInvalidValue;
  RouteKernel<<<static_cast<unsigned>(rows), 128, shared, stream>>>(logits, bias, params, expert, weight);
  return cudaGetLastError();
}

cudaError_t MoePlan(const int32_t* expert, const float* weight, int64_t rows, int64_t k, int32_t* pair_row,
                    int32_t* slot_expert, int32_t* slot_start, int32_t* slot_count, int32_t* num_slots,
                    int32_t* combine_index, float* combine_weight, cudaStream_t stream) {
  if (rows < 1 || rows > kGroupRows || k < 1) return cudaErrorInvalidValue;
  const size_t shared = static_cast<size_t>(rows * k) * sizeof(int32_t);
  if (shared > 48 * 1024) return cudaErrorInvalidValue;
  PlanKernel<<<1, 256, shared, stream>>>(expert, weight, rows, k, pair_row, slot_expert, slot_start, slot_count,
                                         num_slots, combine_index, combine_weight);
  return cudaGetLastError();
}

cudaError_t MoeGroupedGateUp(const float* x, int64_t hidden, int64_t width, const ExpertMatrices& gate_up_table,
                             const int32_t* pair_row, const int32_t* slot_expert, const int32_t* slot_start,
                             const int32_t* slot_count, const int32_t* num_slots, int64_t max_slots, float* act,
                             cudaStream_t stream) {
  if (hidden < 1 || width < 1 || max_slots < 1 || max_slots > kMaxGridY) return cudaErrorInvalidValue;
  if ((gate_up_table.bf16 == nullptr) == (gate_up_table.fp8 == nullptr)) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>((width + kWarps - 1) / kWarps), static_cast<unsigned>(max_slots));
  if (gate_up_table.fp8 != nullptr) {
    GroupedGateUpKernel<true><<<grid, kThreads, 0, stream>>>(x, hidden, width, gate_up_table, pair_row, slot_expert,
                                                             slot_start, slot_count, num_slots, act);
  } else {
    GroupedGateUpKernel<false><<<grid, kThreads, 0, stream>>>(x, hidden, width, gate_up_table, pair_row, slot_expert,
                                                              slot_start, slot_count, num_slots, act);
  }
  return cudaGetLastError();
}

cudaError_t MoeGroupedDown(const float* act, int64_t hidden, int64_t width, const ExpertMatrices& down_table,
                           const int32_t* slot_expert, const int32_t* slot_start, const int32_t* slot_count,
                           const int32_t* num_slots, int64_t max_slots, float* y, cudaStream_t stream) {
  if (hidden < 1 || width < 1 || max_slots < 1 || max_slots > kMaxGridY) return cudaErrorInvalidValue;
  if ((down_table.bf16 == nullptr) == (down_table.fp8 == nullptr)) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>((hidden + kWarps - 1) / kWarps), static_cast<unsigned>(max_slots));
  if (down_table.fp8 != nullptr) {
    GroupedDownKernel<true><<<grid, kThreads, 0, stream>>>(act, hidden, width, down_table, slot_expert, slot_start,
                                                           slot_count, num_slots, y);
  } else {
    GroupedDownKernel<false><<<grid, kThreads, 0, stream>>>(act, hidden, width, down_table, slot_expert, slot_start,
                                                            slot_count, num_slots, y);
  }
  return cudaGetLastError();
}

cudaError_t GatherRows(const float* src, const int32_t* index, int64_t n, int64_t cols, float* dst,
                       cudaStream_t stream) {
  if (n < 0 || cols < 1 || n > 0x7fffffff) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  GatherRowsKernel<<<static_cast<unsigned>(n), 256, 0, stream>>>(src, index, cols, dst);
  return cudaGetLastError();
}

cudaError_t MoeCombine(const float* y, const int32_t* combine_index, const float* combine_weight, int64_t rows,
                       int64_t k, int64_t hidden, bool accumulate, float* out, cudaStream_t stream) {
  if (rows < 0 || k < 1 || hidden < 1 || rows > 0x7fffffff) return cudaErrorInvalidValue;
  if (rows == 0) return cudaSuccess;
  CombineKernel<<<static_cast<unsigned>(rows), 256, 0, stream>>>(y, combine_index, combine_weight, k, hidden,
                                                                  accumulate, out);
  return cudaGetLastError();
}

}  // namespace mtpspec::cuda::launch
