// Kernels of attention/mla_cuda: the absorbed-form attention core (see mla_cuda_launch.h).
//
// LatentAttention is a split softmax with a fixed split: the row's key list is cut into blocks of
// kAttentionKeysPerSplit entries; block (split, head group, row) scores its keys for G heads
// (phase A: one warp per key, lanes over the latent dims, a fixed shuffle tree), takes the
// block-local softmax numerators p = exp(s − m) and their sum l, and accumulates z_split = Σ p·c
// (phase B: threads over latent dims, keys in list order). A combine kernel merges the splits in
// split order. Splits that hold no usable key are skipped in the merge, so a row computed alone
// (fewer list entries past its causal end) gives bit-identical results to the same row in a block.
// All heads of a group share each key load; all rows of a call read the same cache lines, which
// the L2 cache keeps for the other rows when selections overlap.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "attention/mla_cuda_launch.h"

namespace mtpspec::cuda::launch {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kSplit = static_cast<int>(kAttentionKeysPerSplit);
constexpr int kMaxRowsPerPass = 16;  // rows kept in registers by the absorb/un-absorb kernels
constexpr int kMaxDimsPerThread = 4;  // r_kv ≤ 4·kThreads

__device__ __forceinline__ float NegInf() { return -__int_as_float(0x7f800000); }

__device__ __forceinline__ float WarpSum(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, offset);
  return v;
}

__device__ __forceinline__ float WarpMax(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(0xFFFFFFFFu, v, offset));
  return v;
}

__device__ __forceinline__ float LoadLatent(const LatentCacheView& cache, int64_t j, int64_t i) {
  if (cache.latent_i8 != nullptr) return static_cast<float>(cache.latent_i8[j * cache.r_kv + i]) * cache.latent_scale[j];
  return cache.latent[j * cache.r_kv + i];
}

// ---------------------------------------------------------------- absorb / un-absorb

// grid (N_h, ceil(r_kv / kThreads)); thread = one latent column c of head h, for every row.
// q_lat[r, h, c] = Σ_{i < d_n} q[r, h, i] · kv_b[h·(d_n+d_v) + i, c], summed in i order.
__global__ void AbsorbQueryKernel(const float* __restrict__ q, int64_t rows, int64_t n_heads, int64_t d_n,
                                  int64_t d_r, int64_t d_v, int64_t r_kv, const __nv_bfloat16* __restrict__ kv_b,
                                  float* __restrict__ q_lat) {
  extern __shared__ float q_nope[];  // [kMaxRowsPerPass, d_n]
  const int64_t h = blockIdx.x;
  const int64_t c = static_cast<int64_t>(blockIdx.y) * kThreads + threadIdx.x;
  const int64_t d_qk = d_n + d_r;
  const __nv_bfloat16* w_uk = kv_b + h * (d_n + d_v) * r_kv;  // [d_n, r_kv] rows of head h
  for (int64_t r0 = 0; r0 < rows; r0 += kMaxRowsPerPass) {
    const int group = static_cast<int>(rows - r0 < kMaxRowsPerPass ? rows - r0 : kMaxRowsPerPass);
    __syncthreads();  // the previous group's readers are done
    for (int64_t idx = threadIdx.x; idx < group * d_n; idx += kThreads) {
      const int64_t rr = idx / d_n, i = idx % d_n;
      q_nope[idx] = q[((r0 + rr) * n_heads + h) * d_qk + i];
    }
    __syncthreads();
    if (c < r_kv) {
      float acc[kMaxRowsPerPass];  // registers: every index below is a compile-time constant
#pragma unroll
      for (int rr = 0; rr < kMaxRowsPerPass; ++rr) acc[rr] = 0.0f;
      for (int64_t i = 0; i < d_n; ++i) {
        const float w = __bfloat162float(w_uk[i * r_kv + c]);
#pragma unroll
        for (int rr = 0; rr < kMaxRowsPerPass; ++rr) {
          if (rr < group) acc[rr] = fmaf(q_nope[rr * d_n + i], w, acc[rr]);
        }
      }
#pragma unroll
      for (int rr = 0; rr < kMaxRowsPerPass; ++rr) {
        if (rr < group) q_lat[((r0 + rr) * n_heads + h) * r_kv + c] = acc[rr];
      }
    }
  }
}

// grid (N_h, ceil(d_v / kWarps)); warp = one output v of head h, for every row; lanes stride over
// the latent dims and reduce with a fixed shuffle tree.
__global__ void UnabsorbOutputKernel(const float* __restrict__ z, int64_t rows, int64_t n_heads, int64_t d_n,
                                     int64_t d_v, int64_t r_kv, const __nv_bfloat16* __restrict__ kv_b,
                                     float* __restrict__ o) {
  extern __shared__ float z_rows[];  // [kMaxRowsPerPass, r_kv]
  const int64_t h = blockIdx.x;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t v = static_cast<int64_t>(blockIdx.y) * kWarps + warp;
  const __nv_bfloat16* w_uv = kv_b + (h * (d_n + d_v) + d_n) * r_kv;  // [d_v, r_kv] rows of head h
  for (int64_t r0 = 0; r0 < rows; r0 += kMaxRowsPerPass) {
    const int group = static_cast<int>(rows - r0 < kMaxRowsPerPass ? rows - r0 : kMaxRowsPerPass);
    __syncthreads();
    for (int64_t idx = threadIdx.x; idx < group * r_kv; idx += kThreads) {
      const int64_t rr = idx / r_kv, c = idx % r_kv;
      z_rows[idx] = z[((r0 + rr) * n_heads + h) * r_kv + c];
    }
    __syncthreads();
    if (v < d_v) {  // uniform per warp
      float acc[kMaxRowsPerPass];  // registers: every index below is a compile-time constant
#pragma unroll
      for (int rr = 0; rr < kMaxRowsPerPass; ++rr) acc[rr] = 0.0f;
      for (int64_t c = lane; c < r_kv; c += 32) {
        const float w = __bfloat162float(w_uv[v * r_kv + c]);
#pragma unroll
        for (int rr = 0; rr < kMaxRowsPerPass; ++rr) {
          if (rr < group) acc[rr] = fmaf(w, z_rows[rr * r_kv + c], acc[rr]);
        }
      }
#pragma unroll
      for (int rr = 0; rr < kMaxRowsPerPass; ++rr) acc[rr] = WarpSum(acc[rr]);
      if (lane == 0) {
#pragma unroll
        for (int rr = 0; rr < kMaxRowsPerPass; ++rr) {
          if (rr < group) o[(r0 + rr) * n_heads * d_v + h * d_v + v] = acc[rr];
        }
      }
    }
  }
}

// ---------------------------------------------------------------- attention core

struct PartialBuffers {
  float* m;  // [rows, N_h, splits] block-local max score (−∞: no usable key)
  float* l;  // [rows, N_h, splits] Σ exp(s − m)
  float* z;  // [rows, N_h, splits, r_kv] Σ exp(s − m)·c
};

// grid (splits, N_h / G, rows). Shared memory: q [G, r_kv + d_r], p [G, kSplit], slots [kSplit].
template <int G>
__global__ void LatentAttentionPartialKernel(AttentionQuery query, LatentCacheView cache,
                                             const int32_t* __restrict__ keys, int64_t width, int64_t num_keys,
                                             PartialBuffers part) {
  extern __shared__ float smem[];
  const int64_t r_kv = cache.r_kv, d_r = cache.d_r, d_lat = r_kv + d_r;
  float* q_s = smem;                                               // [G, r_kv + d_r]
  float* p_s = q_s + G * d_lat;                                    // [G, kSplit]
  int32_t* slot_s = reinterpret_cast<int32_t*>(p_s + G * kSplit);  // [kSplit] cache slot or −1
  __shared__ float m_s[G];
  __shared__ float l_s[G];

  const int64_t split = blockIdx.x;
  const int64_t h0 = static_cast<int64_t>(blockIdx.y) * G;
  const int64_t r = blockIdx.z;
  const int64_t n_heads = query.n_heads;
  const int64_t splits = gridDim.x;
  const int64_t k_begin = split * kSplit;
  const int n = static_cast<int>(width - k_begin < kSplit ? width - k_begin : kSplit);
  const int64_t position = query.first_position + r;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;

  for (int64_t idx = threadIdx.x; idx < G * d_lat; idx += kThreads) {
    const int64_t g = idx / d_lat, i = idx % d_lat;
    const int64_t h = h0 + g;
    q_s[idx] = i < r_kv ? query.q_lat[(r * n_heads + h) * r_kv + i]
                        : query.q_rope[r * query.q_rope_row_stride + h * query.q_rope_head_stride + (i - r_kv)];
  }
  // The re-mask: list entries that are −1, beyond the cache (≥ T) or in the row's future are dropped.
  for (int k = threadIdx.x; k < kSplit; k += kThreads) {
    int64_t j = -1;
    if (k < n) j = keys != nullptr ? static_cast<int64_t>(keys[r * width + k_begin + k]) : k_begin + k;
    const bool usable = j >= 0 && j < num_keys && j <= position;
    slot_s[k] = usable ? static_cast<int32_t>(j) : -1;
  }
  __syncthreads();

  // Phase A: scores s[g, k] = scale · (q_lat^g · c_j + q_rope^g · k_r_j).
  for (int k = warp; k < n; k += kWarps) {
    const int64_t j = slot_s[k];
    if (j < 0) {  // uniform per warp
      if (lane == 0) {
        for (int g = 0; g < G; ++g) p_s[g * kSplit + k] = NegInf();
      }
      continue;
    }
    float acc[G];
#pragma unroll
    for (int g = 0; g < G; ++g) acc[g] = 0.0f;
#pragma unroll 4
    for (int64_t i = lane; i < r_kv; i += 32) {
      const float c = LoadLatent(cache, j, i);
#pragma unroll
      for (int g = 0; g < G; ++g) acc[g] = fmaf(q_s[g * d_lat + i], c, acc[g]);
    }
    for (int64_t i = lane; i < d_r; i += 32) {
      const float kr = cache.rope_key[j * d_r + i];
#pragma unroll
      for (int g = 0; g < G; ++g) acc[g] = fmaf(q_s[g * d_lat + r_kv + i], kr, acc[g]);
    }
#pragma unroll
    for (int g = 0; g < G; ++g) acc[g] = WarpSum(acc[g]);
    if (lane == 0) {
      for (int g = 0; g < G; ++g) p_s[g * kSplit + k] = acc[g] * query.softmax_scale;
    }
  }
  __syncthreads();

  // Block-local softmax numerators: warp g handles head g (G ≤ kWarps).
  if (warp < G) {
    float* p = p_s + warp * kSplit;  // [kSplit]
    float m = NegInf();
    for (int k = lane; k < n; k += 32) m = fmaxf(m, p[k]);
    m = WarpMax(m);
    float sum = 0.0f;
    for (int k = lane; k < n; k += 32) {
      const float e = p[k] == NegInf() ? 0.0f : expf(p[k] - m);
      p[k] = e;
      sum += e;
    }
    sum = WarpSum(sum);
    if (lane == 0) {
      m_s[warp] = m;
      l_s[warp] = sum;
    }
  }
  __syncthreads();

  // Phase B: z[g, i] = Σ_k p[g, k] · c_k[i], keys in list order; thread over dims i.
  float acc[G][kMaxDimsPerThread];
#pragma unroll
  for (int g = 0; g < G; ++g) {
#pragma unroll
    for (int u = 0; u < kMaxDimsPerThread; ++u) acc[g][u] = 0.0f;
  }
  // Keys in batches of kBatch: all loads of a batch are issued before its multiply-adds, which
  // still run key by key in list order (the same arithmetic as one key at a time).
  constexpr int kBatch = 8;
  for (int k0 = 0; k0 < n; k0 += kBatch) {
    float c[kBatch][kMaxDimsPerThread];
#pragma unroll
    for (int t = 0; t < kBatch; ++t) {
      const int64_t j = k0 + t < n ? slot_s[k0 + t] : -1;
#pragma unroll
      for (int u = 0; u < kMaxDimsPerThread; ++u) {
        const int64_t i = threadIdx.x + static_cast<int64_t>(u) * kThreads;
        c[t][u] = j >= 0 && i < r_kv ? LoadLatent(cache, j, i) : 0.0f;
      }
    }
#pragma unroll
    for (int t = 0; t < kBatch; ++t) {
      if (k0 + t >= n || slot_s[k0 + t] < 0) continue;  // uniform across the block
#pragma unroll
      for (int u = 0; u < kMaxDimsPerThread; ++u) {
#pragma unroll
        for (int g = 0; g < G; ++g) acc[g][u] = fmaf(p_s[g * kSplit + k0 + t], c[t][u], acc[g][u]);
      }
    }
  }
  for (int g = 0; g < G; ++g) {
    const int64_t cell = (r * n_heads + h0 + g) * splits + split;  // [rows, N_h, splits]
#pragma unroll
    for (int u = 0; u < kMaxDimsPerThread; ++u) {
      const int64_t i = threadIdx.x + static_cast<int64_t>(u) * kThreads;
      if (i < r_kv) part.z[cell * r_kv + i] = acc[g][u];
    }
    if (threadIdx.x == 0) {
      part.m[cell] = m_s[g];
      part.l[cell] = l_s[g];
    }
  }
}

// grid (N_h, rows): z = Σ_s e^{m_s − M} z_s / Σ_s e^{m_s − M} l_s over splits with a usable key,
// in split order; 0 when the row has no usable key (the CPU's n = 0 case).
__global__ void CombineSplitsKernel(PartialBuffers part, int64_t n_heads, int64_t splits, int64_t r_kv, float* z) {
  const int64_t h = blockIdx.x, r = blockIdx.y;
  const int64_t cell0 = (r * n_heads + h) * splits;
  float big = NegInf();
  for (int64_t s = 0; s < splits; ++s) big = fmaxf(big, part.m[cell0 + s]);
  float* out = z + (r * n_heads + h) * r_kv;  // [r_kv]
  if (big == NegInf()) {
    for (int64_t i = threadIdx.x; i < r_kv; i += blockDim.x) out[i] = 0.0f;
    return;
  }
  float denominator = 0.0f;
  for (int64_t s = 0; s < splits; ++s) {
    const float m = part.m[cell0 + s];
    if (m == NegInf()) continue;
    denominator = fmaf(expf(m - big), part.l[cell0 + s], denominator);
  }
  const float inv = 1.0f / denominator;
  for (int64_t i = threadIdx.x; i < r_kv; i += blockDim.x) {
    float total = 0.0f;
    for (int64_t s = 0; s < splits; ++s) {
      const float m = part.m[cell0 + s];
      if (m == NegInf()) continue;
      total = fmaf(expf(m - big), part.z[(cell0 + s) * r_kv + i], total);
    }
    out[i] = total * inv;
  }
}

__global__ void FillKernel(int32_t* dst, int64_t n, int32_t value) {
  for (int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; t < n;
       t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    dst[t] = value;
  }
}

__global__ void ScatterSelectedKernel(const int32_t* __restrict__ selected, int64_t rows, int64_t width,
                                      int64_t num_keys, int32_t* masked) {
  const int64_t total = rows * width;
  for (int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; t < total;
       t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = t / width;
    const int32_t j = selected[t];
    if (j >= 0 && j < num_keys) masked[r * num_keys + j] = j;
  }
}

unsigned GridFor(int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < 65535 ? (blocks > 0 ? blocks : 1) : 65535);
}

template <int G>
cudaError_t LaunchPartial(const AttentionQuery& query, const LatentCacheView& cache, const int32_t* keys,
                          int64_t width, int64_t num_keys, int64_t splits, const PartialBuffers& part,
                          cudaStream_t stream) {
  const size_t smem = sizeof(float) * (static_cast<size_t>(G) * (cache.r_kv + cache.d_r) +
                                       static_cast<size_t>(G) * kSplit) +
                      sizeof(int32_t) * kSplit;
  cudaError_t err = cudaFuncSetAttribute(LatentAttentionPartialKernel<G>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  if (err != cudaSuccess) return err;
  const dim3 grid(static_cast<unsigned>(splits), static_cast<unsigned>(query.n_heads / G),
                  static_cast<unsigned>(query.rows));
  LatentAttentionPartialKernel<G><<<grid, kThreads, smem, stream>>>(query, cache, keys, width, num_keys, part);
  return cudaGetLastError();
}

}  // namespace

cudaError_t AbsorbQuery(const float* q, int64_t rows, int64_t n_heads, int64_t d_n, int64_t d_r, int64_t d_v,
                        int64_t r_kv, const __nv_bfloat16* kv_b, float* q_lat, cudaStream_t stream) {
  if (rows <= 0) return cudaSuccess;
  const size_t smem = sizeof(float) * kMaxRowsPerPass * d_n;
  cudaError_t err = cudaFuncSetAttribute(AbsorbQueryKernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(smem));
  if (err != cudaSuccess) return err;
  const dim3 grid(static_cast<unsigned>(n_heads), static_cast<unsigned>((r_kv + kThreads - 1) / kThreads));
  AbsorbQueryKernel<<<grid, kThreads, smem, stream>>>(q, rows, n_heads, d_n, d_r, d_v, r_kv, kv_b, q_lat);
  return cudaGetLastError();
}

cudaError_t UnabsorbOutput(const float* z, int64_t rows, int64_t n_heads, int64_t d_n, int64_t d_v, int64_t r_kv,
                           const __nv_bfloat16* kv_b, float* o, cudaStream_t stream) {
  if (rows <= 0) return cudaSuccess;
  const size_t smem = sizeof(float) * kMaxRowsPerPass * r_kv;
  cudaError_t err = cudaFuncSetAttribute(UnabsorbOutputKernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(smem));
  if (err != cudaSuccess) return err;
  const dim3 grid(static_cast<unsigned>(n_heads), static_cast<unsigned>((d_v + kWarps - 1) / kWarps));
  UnabsorbOutputKernel<<<grid, kThreads, smem, stream>>>(z, rows, n_heads, d_n, d_v, r_kv, kv_b, o);
  return cudaGetLastError();
}

int64_t LatentAttentionScratchFloats(int64_t rows, int64_t n_heads, int64_t width, int64_t r_kv) {
  const int64_t splits = (width + kSplit - 1) / kSplit;
  return rows * n_heads * splits * (2 + r_kv);
}

cudaError_t LatentAttention(const AttentionQuery& query, const LatentCacheView& cache, const int32_t* keys,
                            int64_t width, int64_t num_keys, float* scratch, float* z, cudaStream_t stream) {
  if (query.rows <= 0) return cudaSuccess;
  if (cache.r_kv > kMaxDimsPerThread * kThreads || query.rows > 65535 || width <= 0) return cudaErrorInvalidValue;
  const int64_t splits = (width + kSplit - 1) / kSplit;
  const int64_t cells = query.rows * query.n_heads * splits;
  const PartialBuffers part{scratch, scratch + cells, scratch + 2 * cells};
  cudaError_t err;
  if (query.n_heads % 4 == 0) {
    err = LaunchPartial<4>(query, cache, keys, width, num_keys, splits, part, stream);
  } else if (query.n_heads % 2 == 0) {
    err = LaunchPartial<2>(query, cache, keys, width, num_keys, splits, part, stream);
  } else {
    err = LaunchPartial<1>(query, cache, keys, width, num_keys, splits, part, stream);
  }
  if (err != cudaSuccess) return err;
  const dim3 grid(static_cast<unsigned>(query.n_heads), static_cast<unsigned>(query.rows));
  CombineSplitsKernel<<<grid, kThreads, 0, stream>>>(part, query.n_heads, splits, cache.r_kv, z);
  return cudaGetLastError();
}

cudaError_t BuildMaskedKeys(const int32_t* selected, int64_t rows, int64_t width, int64_t num_keys, int32_t* masked,
                            cudaStream_t stream) {
  FillKernel<<<GridFor(rows * num_keys), kThreads, 0, stream>>>(masked, rows * num_keys, -1);
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess || rows * width == 0) return err;
  ScatterSelectedKernel<<<GridFor(rows * width), kThreads, 0, stream>>>(selected, rows, width, num_keys, masked);
  return cudaGetLastError();
}

}  // namespace mtpspec::cuda::launch
