// Kernels of attention/indexer_cuda: lightning-indexer scoring and the radix top-k.
//
// Scoring: one block per tile of kKeyTile keys; the tile sits in shared memory and is scored
// against every row's queries in turn. Each (row, head, key) dot product is one thread's
// sequential fma chain over d_I, and each score the head sum in head order, so a row's scores do
// not depend on the other rows of the call.
//
// Top-k (per row, width = min(K, T), over the causal keys j < causal_r):
//   1. Map each float to a 32-bit key whose unsigned order is the float order (−0 folded into +0).
//   2. Four passes, 8 bits each, most significant first: histogram of the next digit among keys
//      matching the digits fixed so far (shared-memory histogram per chunk, then integer atomics
//      into the row's global histogram: integer sums are exact, so the result is deterministic),
//      then pick the digit whose bucket holds the width-th largest key. After four passes the
//      threshold key t is known, with `remaining` = how many keys equal to t to take.
//   3. Count per chunk the keys > t and the keys == t; an exclusive scan over chunks; then each
//      chunk writes its selected keys in position order: key > t, or key == t among the first
//      `remaining` ties of the row. That is the CPU's rule (larger first, ties by lower index,
//      listed in increasing position).
#include <cuda_runtime.h>

#include <cstdint>

#include "attention/indexer_cuda_launch.h"

namespace mtpspec::cuda::launch {
namespace {

constexpr int kThreads = 256;
constexpr int kKeyTile = 64;     // keys per scoring block
constexpr int kChunk = 1024;     // keys per top-k block
constexpr int kBins = 256;       // 8-bit digits
constexpr int kPasses = 4;

// ---------------------------------------------------------------- scoring

// Shared memory: keys [kKeyTile, d+1], q [n_heads, d+1], dots [kKeyTile, n_heads+1] (padded rows
// avoid bank conflicts).
__global__ void ScoreKernel(const float* __restrict__ q, const float* __restrict__ head_weights, float head_scale,
                            int64_t rows, int n_heads, int d, int64_t first_position, const float* __restrict__ keys,
                            int64_t num_keys, float dot_scale, float* __restrict__ scores) {
  extern __shared__ float smem[];
  const int pitch = d + 1;
  float* key_tile = smem;                                // [kKeyTile, d+1]
  float* q_tile = key_tile + kKeyTile * pitch;           // [n_heads, d+1]
  float* dots = q_tile + n_heads * pitch;                // [kKeyTile, n_heads+1]
  const int64_t j0 = static_cast<int64_t>(blockIdx.x) * kKeyTile;
  const int tile = static_cast<int>(num_keys - j0 < kKeyTile ? num_keys - j0 : kKeyTile);
  const float neg_inf = -__int_as_float(0x7f800000);

  for (int idx = threadIdx.x; idx < kKeyTile * d; idx += blockDim.x) {
    const int k = idx / d, i = idx % d;
    key_tile[k * pitch + i] = k < tile ? keys[(j0 + k) * d + i] : 0.0f;
  }
  for (int64_t r = 0; r < rows; ++r) {
    float* out = scores + r * num_keys + j0;  // [tile]
    const int64_t position = first_position + r;
    if (j0 > position) {  // the whole tile is in this row's future
      for (int k = threadIdx.x; k < tile; k += blockDim.x) out[k] = neg_inf;
      continue;
    }
    __syncthreads();  // previous row's readers of q_tile and dots are done (and key_tile is loaded)
    const float* q_row = q + r * n_heads * d;  // [n_heads, d]
    for (int idx = threadIdx.x; idx < n_heads * d; idx += blockDim.x) {
      q_tile[(idx / d) * pitch + idx % d] = q_row[idx];
    }
    __syncthreads();
    for (int pair = threadIdx.x; pair < kKeyTile * n_heads; pair += blockDim.x) {
      const int k = pair % kKeyTile, h = pair / kKeyTile;
      const float* kv = key_tile + k * pitch;
      const float* qv = q_tile + h * pitch;
      float dot = 0.0f;
      for (int i = 0; i < d; ++i) dot = fmaf(qv[i], kv[i], dot);
      dots[k * (n_heads + 1) + h] = dot;
    }
    __syncthreads();
    const float* w = head_weights + r * n_heads;  // [n_heads]
    for (int k = threadIdx.x; k < tile; k += blockDim.x) {
      if (j0 + k > position) {
        out[k] = neg_inf;
        continue;
      }
      float total = 0.0f;
      for (int h = 0; h < n_heads; ++h) {
        total = fmaf(w[h] * head_scale, fmaxf(dots[k * (n_heads + 1) + h] * dot_scale, 0.0f), total);
      }
      out[k] = total;
    }
  }
}

// ---------------------------------------------------------------- top-k

// Unsigned key with the float's order; −0 and +0 share a key (they compare equal as floats).
__device__ __forceinline__ uint32_t OrderedKey(float f) {
  uint32_t bits = __float_as_uint(f);
  if (bits == 0x80000000u) bits = 0u;
  return (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
}

struct RowState {
  uint32_t prefix;     // digits fixed so far (lower bits zero)
  int32_t remaining;   // how many keys still to take inside the current prefix bucket
  int32_t trivial;     // 1: the row has ≤ width causal keys and lists 0 .. width−1
  int32_t pad;
};

__device__ __forceinline__ int64_t CausalKeys(int64_t r, int64_t first_position, int64_t num_keys) {
  const int64_t c = first_position + r + 1;
  return c < num_keys ? c : num_keys;
}

__global__ void InitKernel(int64_t num_keys, int64_t width, int64_t first_position, RowState* state,
                           uint32_t* hist) {
  const int64_t r = blockIdx.x;
  for (int b = threadIdx.x; b < kBins; b += blockDim.x) hist[r * kBins + b] = 0u;
  if (threadIdx.x == 0) {
    state[r].prefix = 0u;
    state[r].remaining = static_cast<int32_t>(width);
    state[r].trivial = CausalKeys(r, first_position, num_keys) <= width ? 1 : 0;
    state[r].pad = 0;
  }
}

// grid (chunks, rows): histogram of digit `shift` among the chunk's causal keys that match the prefix.
__global__ void HistogramKernel(const float* __restrict__ scores, int64_t num_keys, int64_t first_position, int pass,
                                const RowState* __restrict__ state, uint32_t* hist) {
  __shared__ uint32_t local[kBins];
  const int64_t r = blockIdx.y;
  if (state[r].trivial) return;
  for (int b = threadIdx.x; b < kBins; b += blockDim.x) local[b] = 0u;
  __syncthreads();
  const int shift = 24 - 8 * pass;
  const uint32_t high_mask = pass == 0 ? 0u : (0xFFFFFFFFu << (shift + 8));
  const uint32_t prefix = state[r].prefix;
  const int64_t causal = CausalKeys(r, first_position, num_keys);
  const int64_t begin = static_cast<int64_t>(blockIdx.x) * kChunk;
  const int64_t end = begin + kChunk < causal ? begin + kChunk : causal;
  const float* row = scores + r * num_keys;
  for (int64_t j = begin + threadIdx.x; j < end; j += blockDim.x) {
    const uint32_t key = OrderedKey(row[j]);
    if ((key & high_mask) == prefix) atomicAdd(&local[(key >> shift) & 0xFFu], 1u);
  }
  __syncthreads();
  for (int b = threadIdx.x; b < kBins; b += blockDim.x) {
    if (local[b] != 0u) atomicAdd(&hist[r * kBins + b], local[b]);
  }
}

// One block of kBins threads per row: choose the digit of the remaining-th largest key and clear
// the histogram for the next pass.
__global__ void ChooseDigitKernel(int pass, RowState* state, uint32_t* hist) {
  __shared__ uint32_t above[kBins];  // above[b] = Σ_{b' > b} hist[b'] after the scan
  const int64_t r = blockIdx.x;
  const int b = threadIdx.x;
  if (state[r].trivial) return;  // uniform across the block
  const uint32_t count = hist[r * kBins + b];
  // Inclusive suffix sum by doubling: suffix[b] = Σ_{b' ≥ b} hist[b'].
  above[b] = count;
  __syncthreads();
  for (int stride = 1; stride < kBins; stride <<= 1) {
    const uint32_t add = b + stride < kBins ? above[b + stride] : 0u;
    __syncthreads();
    above[b] += add;
    __syncthreads();
  }
  const uint32_t suffix_inclusive = above[b];
  const uint32_t suffix_exclusive = suffix_inclusive - count;
  const uint32_t remaining = static_cast<uint32_t>(state[r].remaining);
  __syncthreads();
  // Exactly one digit satisfies exclusive < remaining ≤ inclusive (remaining ≥ 1 and the bucket
  // total ≥ remaining by construction).
  if (suffix_exclusive < remaining && remaining <= suffix_inclusive) {
    const int shift = 24 - 8 * pass;
    state[r].prefix |= static_cast<uint32_t>(b) << shift;
    state[r].remaining = static_cast<int32_t>(remaining - suffix_exclusive);
  }
  hist[r * kBins + b] = 0u;
}

// grid (chunks, rows): per chunk, the number of causal keys > t and == t.
__global__ void CountKernel(const float* __restrict__ scores, int64_t num_keys, int64_t first_position,
                            const RowState* __restrict__ state, int64_t chunks, uint32_t* greater_count,
                            uint32_t* tie_count) {
  __shared__ uint32_t totals[2];
  const int64_t r = blockIdx.y;
  if (state[r].trivial) return;
  if (threadIdx.x == 0) totals[0] = totals[1] = 0u;
  __syncthreads();
  const uint32_t threshold = state[r].prefix;
  const int64_t causal = CausalKeys(r, first_position, num_keys);
  const int64_t begin = static_cast<int64_t>(blockIdx.x) * kChunk;
  const int64_t end = begin + kChunk < causal ? begin + kChunk : causal;
  const float* row = scores + r * num_keys;
  uint32_t greater = 0u, ties = 0u;
  for (int64_t j = begin + threadIdx.x; j < end; j += blockDim.x) {
    const uint32_t key = OrderedKey(row[j]);
    greater += key > threshold ? 1u : 0u;
    ties += key == threshold ? 1u : 0u;
  }
  atomicAdd(&totals[0], greater);
  atomicAdd(&totals[1], ties);
  __syncthreads();
  if (threadIdx.x == 0) {
    greater_count[r * chunks + blockIdx.x] = totals[0];
    tie_count[r * chunks + blockIdx.x] = totals[1];
  }
}

// One thread per row: exclusive scans over chunks of the ties and of the selected keys.
__global__ void ScanChunksKernel(const RowState* __restrict__ state, int64_t rows, int64_t chunks,
                                 const uint32_t* __restrict__ greater_count, const uint32_t* __restrict__ tie_count,
                                 uint32_t* ties_before, uint32_t* selected_before) {
  const int64_t r = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (r >= rows || state[r].trivial) return;
  const uint32_t remaining = static_cast<uint32_t>(state[r].remaining);
  uint32_t ties = 0u, selected = 0u;
  for (int64_t c = 0; c < chunks; ++c) {
    ties_before[r * chunks + c] = ties;
    selected_before[r * chunks + c] = selected;
    const uint32_t tie_here = tie_count[r * chunks + c];
    const uint32_t taken_ties = ties >= remaining ? 0u : (remaining - ties < tie_here ? remaining - ties : tie_here);
    selected += greater_count[r * chunks + c] + taken_ties;
    ties += tie_here;
  }
}

// Exclusive prefix count of `flag` over the block (threads in index order) and the block total.
__device__ uint32_t BlockExclusiveCount(bool flag, uint32_t* warp_totals, uint32_t* total) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const unsigned ballot = __ballot_sync(0xFFFFFFFFu, flag);
  const uint32_t in_warp = __popc(ballot & ((1u << lane) - 1u));
  if (lane == 0) warp_totals[warp] = __popc(ballot);
  __syncthreads();
  uint32_t before = 0u;
  for (int w = 0; w < warp; ++w) before += warp_totals[w];
  if (threadIdx.x == 0) {
    uint32_t sum = 0u;
    for (int w = 0; w < kThreads / 32; ++w) sum += warp_totals[w];
    *total = sum;
  }
  __syncthreads();
  const uint32_t result = before + in_warp;
  __syncthreads();  // warp_totals and total may be reused by the next call
  return result;
}

// grid (chunks, rows): writes the chunk's selected keys in position order.
__global__ void WriteSelectedKernel(const float* __restrict__ scores, int64_t num_keys, int64_t first_position,
                                    int64_t width, const RowState* __restrict__ state, int64_t chunks,
                                    const uint32_t* __restrict__ ties_before,
                                    const uint32_t* __restrict__ selected_before, int32_t* selected) {
  __shared__ uint32_t warp_totals[kThreads / 32];
  __shared__ uint32_t totals[2];
  const int64_t r = blockIdx.y;
  const int64_t begin = static_cast<int64_t>(blockIdx.x) * kChunk;
  int32_t* dst = selected + r * width;  // [width]
  if (state[r].trivial) {
    for (int64_t j = begin + threadIdx.x; j < begin + kChunk && j < width; j += blockDim.x) {
      dst[j] = static_cast<int32_t>(j);
    }
    return;
  }
  const uint32_t threshold = state[r].prefix;
  const uint32_t remaining = static_cast<uint32_t>(state[r].remaining);
  const int64_t causal = CausalKeys(r, first_position, num_keys);
  const float* row = scores + r * num_keys;
  uint32_t tie_rank = ties_before[r * chunks + blockIdx.x];     // ties of the row before this tile
  uint32_t out_pos = selected_before[r * chunks + blockIdx.x];  // selected keys before this tile
  // Tiles of blockDim keys in order; every thread runs every iteration (the block counts are
  // collective), and keys past the causal end count as neither.
  for (int64_t tile = begin; tile < begin + kChunk; tile += blockDim.x) {
    const int64_t j = tile + threadIdx.x;
    uint32_t key = 0u;
    const bool in_range = j < causal && j < begin + kChunk;
    if (in_range) key = OrderedKey(row[j]);
    const bool tie = in_range && key == threshold;
    const uint32_t my_tie_rank = tie_rank + BlockExclusiveCount(tie, warp_totals, &totals[0]);
    const bool take = in_range && (key > threshold || (tie && my_tie_rank < remaining));
    const uint32_t my_out = out_pos + BlockExclusiveCount(take, warp_totals, &totals[1]);
    if (take && my_out < width) dst[my_out] = static_cast<int32_t>(j);
    tie_rank += totals[0];
    out_pos += totals[1];
    __syncthreads();  // totals are rewritten by the next tile
  }
}

__global__ void IotaKernel(int64_t rows, int64_t width, int32_t* selected) {
  const int64_t total = rows * width;
  for (int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; t < total;
       t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    selected[t] = static_cast<int32_t>(t % width);
  }
}

size_t AlignUp(size_t n) { return (n + 255) / 256 * 256; }

struct TopKBuffers {
  RowState* state;             // [rows]
  uint32_t* hist;              // [rows, kBins]
  uint32_t* greater_count;     // [rows, chunks]
  uint32_t* tie_count;         // [rows, chunks]
  uint32_t* ties_before;       // [rows, chunks]
  uint32_t* selected_before;   // [rows, chunks]
};

TopKBuffers CarveTopK(void* workspace, int64_t rows, int64_t chunks) {
  char* p = static_cast<char*>(workspace);
  TopKBuffers b;
  b.state = reinterpret_cast<RowState*>(p);
  p += AlignUp(sizeof(RowState) * rows);
  b.hist = reinterpret_cast<uint32_t*>(p);
  p += AlignUp(sizeof(uint32_t) * rows * kBins);
  uint32_t** per_chunk[] = {&b.greater_count, &b.tie_count, &b.ties_before, &b.selected_before};
  for (uint32_t** dst : per_chunk) {
    *dst = reinterpret_cast<uint32_t*>(p);
    p += AlignUp(sizeof(uint32_t) * rows * chunks);
  }
  return b;
}

}  // namespace

cudaError_t IndexerScoreKeys(const float* q, const float* head_weights, float head_scale, int64_t rows,
                             int64_t n_heads, int64_t head_dim, int64_t first_position, const float* keys,
                             int64_t num_keys, float* scores, cudaStream_t stream) {
  if (rows <= 0 || num_keys <= 0) return cudaSuccess;
  const int d = static_cast<int>(head_dim), nh = static_cast<int>(n_heads);
  const size_t smem = sizeof(float) * (static_cast<size_t>(kKeyTile) * (d + 1) + static_cast<size_t>(nh) * (d + 1) +
                                       static_cast<size_t>(kKeyTile) * (nh + 1));
  cudaError_t err = cudaFuncSetAttribute(ScoreKernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(smem));
  if (err != cudaSuccess) return err;
  const int64_t blocks = (num_keys + kKeyTile - 1) / kKeyTile;
  const float dot_scale = 1.0f / sqrtf(static_cast<float>(head_dim));
  ScoreKernel<<<static_cast<unsigned>(blocks), kThreads, smem, stream>>>(q, head_weights, head_scale, rows, nh, d,
                                                                        first_position, keys, num_keys, dot_scale,
                                                                        scores);
  return cudaGetLastError();
}

size_t RadixTopKWorkspaceBytes(int64_t rows, int64_t num_keys) {
  const int64_t chunks = (num_keys + kChunk - 1) / kChunk;
  return AlignUp(sizeof(RowState) * rows) + AlignUp(sizeof(uint32_t) * rows * kBins) +
         4 * AlignUp(sizeof(uint32_t) * rows * chunks);
}

cudaError_t RadixTopK(const float* scores, int64_t rows, int64_t num_keys, int64_t width, int64_t first_position,
                      void* workspace, int32_t* selected, cudaStream_t stream) {
  if (rows <= 0 || width <= 0) return cudaSuccess;
  const int64_t chunks = (num_keys + kChunk - 1) / kChunk;
  const TopKBuffers b = CarveTopK(workspace, rows, chunks);
  const dim3 grid(static_cast<unsigned>(chunks), static_cast<unsigned>(rows));
  InitKernel<<<static_cast<unsigned>(rows), kBins, 0, stream>>>(num_keys, width, first_position, b.state, b.hist);
  for (int pass = 0; pass < kPasses; ++pass) {
    HistogramKernel<<<grid, kThreads, 0, stream>>>(scores, num_keys, first_position, pass, b.state, b.hist);
    ChooseDigitKernel<<<static_cast<unsigned>(rows), kBins, 0, stream>>>(pass, b.state, b.hist);
  }
  CountKernel<<<grid, kThreads, 0, stream>>>(scores, num_keys, first_position, b.state, chunks, b.greater_count,
                                             b.tie_count);
  const unsigned scan_blocks = static_cast<unsigned>((rows + 127) / 128);
  ScanChunksKernel<<<scan_blocks, 128, 0, stream>>>(b.state, rows, chunks, b.greater_count, b.tie_count,
                                                    b.ties_before, b.selected_before);
  WriteSelectedKernel<<<grid, kThreads, 0, stream>>>(scores, num_keys, first_position, width, b.state, chunks,
                                                     b.ties_before, b.selected_before, selected);
  return cudaGetLastError();
}

cudaError_t IotaRows(int64_t rows, int64_t width, int32_t* selected, cudaStream_t stream) {
  const int64_t total = rows * width;
  if (total <= 0) return cudaSuccess;
  int64_t blocks = (total + kThreads - 1) / kThreads;
  if (blocks > 65535) blocks = 65535;
  IotaKernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(rows, width, selected);
  return cudaGetLastError();
}

}  // namespace mtpspec::cuda::launch
