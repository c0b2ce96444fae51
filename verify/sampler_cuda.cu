// Kernels of verify/sampler_cuda: softmax in double, the per-row sort, the top-k / top-p / min-p cut,
// the Philox-keyed inverse-CDF draw and argmax. One block of kThreads per row; every reduction and
// scan uses cub's block primitives, whose combination order is fixed for a given block size, so a
// row's result never depends on the other rows.
//
// Scans that must find "the first position where a running sum crosses a value" split the row into
// kThreads contiguous chunks: each thread sums its chunk left to right, a block-wide exclusive scan
// gives every chunk its starting sum, and each thread then walks its own chunk again.
#include <cuda_runtime.h>
#include <math_constants.h>

#include <cstdint>
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>
#include <cub/device/device_segmented_radix_sort.cuh>

#include "verify/philox_cuda.cuh"
#include "verify/sampler_cuda_launch.h"

namespace mtpspec::cuda::launch {
namespace {

constexpr int kThreads = 512;
constexpr int64_t kNotFound = INT64_MAX;

struct MaxDouble {
  __device__ double operator()(double a, double b) const { return b > a ? b : a; }
};
struct MinInt64 {
  __device__ int64_t operator()(int64_t a, int64_t b) const { return b < a ? b : a; }
};
struct MaxInt64 {
  __device__ int64_t operator()(int64_t a, int64_t b) const { return b > a ? b : a; }
};

// A candidate of argmax: larger value wins, then the lower index.
struct ArgmaxCandidate {
  float value;
  int64_t index;
};
struct ArgmaxOp {
  __device__ ArgmaxCandidate operator()(const ArgmaxCandidate& a, const ArgmaxCandidate& b) const {
    if (b.value > a.value || (b.value == a.value && b.index < a.index)) return b;
    return a;
  }
};

using DoubleReduce = cub::BlockReduce<double, kThreads>;
using Int64Reduce = cub::BlockReduce<int64_t, kThreads>;
using DoubleScan = cub::BlockScan<double, kThreads>;

// The contiguous chunk [begin, end) of [0, n) that thread `t` owns.
__device__ inline void ChunkOf(int64_t n, int t, int64_t* begin, int64_t* end) {
  const int64_t chunk = (n + kThreads - 1) / kThreads;
  *begin = t * chunk < n ? t * chunk : n;
  *end = *begin + chunk < n ? *begin + chunk : n;
}

__global__ void __launch_bounds__(kThreads) SoftmaxKernel(const float* __restrict__ logits, int64_t vocab,
                                                          double temperature, double* __restrict__ probs) {
  __shared__ typename DoubleReduce::TempStorage reduce_storage;
  __shared__ double row_max;
  __shared__ double row_total;
  const float* row_logits = logits + static_cast<int64_t>(blockIdx.x) * vocab;  // [V]
  double* row_probs = probs + static_cast<int64_t>(blockIdx.x) * vocab;         // [V]
  double local_max = -CUDART_INF;
  for (int64_t i = threadIdx.x; i < vocab; i += kThreads) {
    const double v = static_cast<double>(row_logits[i]);
    local_max = v > local_max ? v : local_max;
  }
  const double block_max = DoubleReduce(reduce_storage).Reduce(local_max, MaxDouble());
  if (threadIdx.x == 0) row_max = block_max;
  __syncthreads();
  double local_sum = 0.0;
  for (int64_t i = threadIdx.x; i < vocab; i += kThreads) {
    const double e = exp((static_cast<double>(row_logits[i]) - row_max) / temperature);
    row_probs[i] = e;
    local_sum += e;
  }
  const double block_sum = DoubleReduce(reduce_storage).Sum(local_sum);  // storage reuse after the sync above
  if (threadIdx.x == 0) row_total = block_sum;
  __syncthreads();
  for (int64_t i = threadIdx.x; i < vocab; i += kThreads) row_probs[i] /= row_total;
}

__global__ void FillSortInputsKernel(int64_t rows, int64_t vocab, int32_t* __restrict__ index,
                                     int32_t* __restrict__ offsets) {
  const int64_t total = rows * vocab;
  for (int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; t < total;
       t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    index[t] = static_cast<int32_t>(t % vocab);
  }
  for (int64_t r = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; r <= rows;
       r += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    offsets[r] = static_cast<int32_t>(r * vocab);
  }
}

__global__ void __launch_bounds__(kThreads) FilterSortedKernel(const double* __restrict__ sorted_probs,
                                                               const int32_t* __restrict__ sorted_index,
                                                               int64_t vocab, SamplerFilter filter,
                                                               double* __restrict__ cut_prob,
                                                               int32_t* __restrict__ cut_index,
                                                               double* __restrict__ kept_mass) {
  __shared__ union {
    typename DoubleReduce::TempStorage reduce_double;
    typename Int64Reduce::TempStorage reduce_int;
    typename DoubleScan::TempStorage scan;
  } storage;
  __shared__ int64_t keep_shared;
  const int64_t row = blockIdx.x;
  const double* p = sorted_probs + row * vocab;  // [V] descending
  int64_t keep = vocab;
  if (filter.top_k > 0 && filter.top_k < keep) keep = filter.top_k;

  if (filter.top_p < 1.0) {
    // Smallest prefix whose mass reaches top_p of the mass top-k kept.
    int64_t begin, end;
    ChunkOf(keep, threadIdx.x, &begin, &end);
    double chunk_sum = 0.0;
    for (int64_t i = begin; i < end; ++i) chunk_sum += p[i];
    double chunk_start, mass_kept_by_top_k;
    DoubleScan(storage.scan).ExclusiveSum(chunk_sum, chunk_start, mass_kept_by_top_k);
    const double threshold = filter.top_p * mass_kept_by_top_k;
    int64_t first = kNotFound;
    double running = chunk_start;
    for (int64_t i = begin; i < end; ++i) {
      running += p[i];
      if (running >= threshold) {
        first = i;
        break;
      }
    }
    __syncthreads();  // the scan's storage is reused below
    const int64_t block_first = Int64Reduce(storage.reduce_int).Reduce(first, MinInt64());
    if (threadIdx.x == 0) keep_shared = block_first == kNotFound ? keep : block_first + 1;
    __syncthreads();
    keep = keep_shared;
  }

  if (filter.min_p > 0.0) {
    // The sorted probabilities at or above min_p · max form a prefix; the first entry always stays.
    const double floor = filter.min_p * p[0];
    int64_t count = 0;
    for (int64_t i = 1 + threadIdx.x; i < keep; i += kThreads) count += p[i] >= floor ? 1 : 0;
    __syncthreads();
    const int64_t block_count = Int64Reduce(storage.reduce_int).Sum(count);
    if (threadIdx.x == 0) keep_shared = 1 + block_count;
    __syncthreads();
    keep = keep_shared;
  }

  double local = 0.0;
  for (int64_t i = threadIdx.x; i < keep; i += kThreads) local += p[i];
  __syncthreads();
  const double kept = DoubleReduce(storage.reduce_double).Sum(local);
  if (threadIdx.x == 0) {
    cut_prob[row] = p[keep - 1];
    cut_index[row] = sorted_index[row * vocab + keep - 1];
    kept_mass[row] = kept;
  }
}

__global__ void __launch_bounds__(kThreads) DrawKernel(const double* __restrict__ probs, int64_t vocab,
                                                       const double* __restrict__ cut_prob,
                                                       const int32_t* __restrict__ cut_index,
                                                       const double* __restrict__ kept_mass, uint64_t seed,
                                                       const int64_t* __restrict__ positions, uint32_t rng_stream,
                                                       int32_t* __restrict__ token) {
  __shared__ union {
    typename DoubleScan::TempStorage scan;
    typename Int64Reduce::TempStorage reduce_int;
  } storage;
  __shared__ int64_t found_shared;
  const int64_t row = blockIdx.x;
  const double* row_probs = probs + row * vocab;  // [V]
  const bool filtered = cut_prob != nullptr;
  const double cut_p = filtered ? cut_prob[row] : 0.0;
  const int64_t cut_i = filtered ? cut_index[row] : 0;
  const double mass = filtered ? kept_mass[row] : 1.0;
  // The distribution drawn from, entry i (as SamplingDistribution leaves it).
  auto prob_at = [&](int64_t i) -> double {
    const double v = row_probs[i];
    if (!filtered) return v;
    const bool kept = v > cut_p || (v == cut_p && i <= cut_i);
    return kept ? v / mass : 0.0;
  };
  const double u = UniformAtDevice(seed, static_cast<uint64_t>(positions[row]), rng_stream);

  int64_t begin, end;
  ChunkOf(vocab, threadIdx.x, &begin, &end);
  double chunk_sum = 0.0;
  int64_t last_positive = -1;
  for (int64_t i = begin; i < end; ++i) {
    const double v = prob_at(i);
    if (v <= 0.0) continue;
    chunk_sum += v;
    last_positive = i;
  }
  double chunk_start, total;
  DoubleScan(storage.scan).ExclusiveSum(chunk_sum, chunk_start, total);
  int64_t first = kNotFound;
  double cumulative = chunk_start;
  for (int64_t i = begin; i < end; ++i) {
    const double v = prob_at(i);
    if (v <= 0.0) continue;
    cumulative += v;
    if (u < cumulative) {
      first = i;
      break;
    }
  }
  __syncthreads();
  const int64_t block_first = Int64Reduce(storage.reduce_int).Reduce(first, MinInt64());
  if (threadIdx.x == 0) found_shared = block_first;
  __syncthreads();
  if (found_shared != kNotFound) {
    if (threadIdx.x == 0) token[row] = static_cast<int32_t>(found_shared);
    return;
  }
  // u fell in the rounding gap at the top: the last positive entry (0 when none).
  const int64_t block_last = Int64Reduce(storage.reduce_int).Reduce(last_positive, MaxInt64());
  if (threadIdx.x == 0) token[row] = static_cast<int32_t>(block_last < 0 ? 0 : block_last);
}

__global__ void __launch_bounds__(kThreads) ArgmaxKernel(const float* __restrict__ logits, int64_t vocab,
                                                         int32_t* __restrict__ token) {
  using Reduce = cub::BlockReduce<ArgmaxCandidate, kThreads>;
  __shared__ typename Reduce::TempStorage storage;
  const float* row = logits + static_cast<int64_t>(blockIdx.x) * vocab;  // [V]
  ArgmaxCandidate best{-CUDART_INF_F, INT64_MAX};
  for (int64_t i = threadIdx.x; i < vocab; i += kThreads) {
    const float v = row[i];
    if (best.index == INT64_MAX || v > best.value) best = ArgmaxCandidate{v, i};
  }
  const ArgmaxCandidate winner = Reduce(storage).Reduce(best, ArgmaxOp());
  if (threadIdx.x == 0) token[blockIdx.x] = static_cast<int32_t>(winner.index);
}

__global__ void PhiloxKernel(const uint32_t* __restrict__ counters, const uint32_t* __restrict__ keys, int64_t n,
                             uint32_t* __restrict__ out) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) Philox4x32Device(counters + 4 * i, keys + 2 * i, out + 4 * i);
}

__global__ void UniformKernel(uint64_t seed, const uint64_t* __restrict__ positions, int64_t n, uint32_t rng_stream,
                              double* __restrict__ out) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = UniformAtDevice(seed, positions[i], rng_stream);
}

bool RowsOk(int64_t rows, int64_t vocab) {
  return rows >= 0 && rows <= 0x7fffffff && vocab >= 1 && vocab <= 0x7fffffff && rows * vocab <= 0x7fffffff;
}

unsigned GridFor(int64_t n, int threads) {
  const int64_t blocks = (n + threads - 1) / threads;
  return static_cast<unsigned>(blocks < 65535 ? (blocks < 1 ? 1 : blocks) : 65535);
}

}  // namespace

cudaError_t SamplerSoftmax(const float* logits, int64_t rows, int64_t vocab, double temperature, double* probs,
                           cudaStream_t stream) {
  if (!RowsOk(rows, vocab) || !(temperature > 0.0)) return cudaErrorInvalidValue;
  if (rows == 0) return cudaSuccess;
  SoftmaxKernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(logits, vocab, temperature, probs);
  return cudaGetLastError();
}

cudaError_t SamplerSortTempBytes(int64_t rows, int64_t vocab, size_t* bytes) {
  if (!RowsOk(rows, vocab)) return cudaErrorInvalidValue;
  *bytes = 0;
  return cub::DeviceSegmentedRadixSort::SortPairsDescending(
      nullptr, *bytes, static_cast<const double*>(nullptr), static_cast<double*>(nullptr),
      static_cast<const int32_t*>(nullptr), static_cast<int32_t*>(nullptr), static_cast<int>(rows * vocab),
      static_cast<int>(rows), static_cast<const int32_t*>(nullptr), static_cast<const int32_t*>(nullptr));
}

cudaError_t SamplerSortRows(const double* probs, int64_t rows, int64_t vocab, void* temp, size_t temp_bytes,
                            int32_t* index_scratch, int32_t* offsets, double* sorted_probs, int32_t* sorted_index,
                            cudaStream_t stream) {
  if (!RowsOk(rows, vocab)) return cudaErrorInvalidValue;
  if (rows == 0) return cudaSuccess;
  FillSortInputsKernel<<<GridFor(rows * vocab, 256), 256, 0, stream>>>(rows, vocab, index_scratch, offsets);
  cudaError_t error = cudaGetLastError();
  if (error != cudaSuccess) return error;
  return cub::DeviceSegmentedRadixSort::SortPairsDescending(
      temp, temp_bytes, probs, sorted_probs, index_scratch, sorted_index, static_cast<int>(rows * vocab),
      static_cast<int>(rows), static_cast<const int32_t*>(offsets), static_cast<const int32_t*>(offsets + 1), 0, static_cast<int>(sizeof(double) * 8), stream);
}

cudaError_t SamplerFilterSorted(const double* sorted_probs, const int32_t* sorted_index, int64_t rows, int64_t vocab,
                                const SamplerFilter& filter, double* cut_prob, int32_t* cut_index, double* kept_mass,
                                cudaStream_t stream) {
  if (!RowsOk(rows, vocab) || filter.top_k < 0) return cudaErrorInvalidValue;
  if (rows == 0) return cudaSuccess;
  FilterSortedKernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(sorted_probs, sorted_index, vocab, filter,
                                                                          cut_prob, cut_index, kept_mass);
  return cudaGetLastError();
}

cudaError_t SamplerDraw(const double* probs, int64_t rows, int64_t vocab, const double* cut_prob,
                        const int32_t* cut_index, const double* kept_mass, uint64_t seed, const int64_t* positions,
                        uint32_t rng_stream, int32_t* token, cudaStream_t stream) {
  if (!RowsOk(rows, vocab)) return cudaErrorInvalidValue;
  if (rows == 0) return cudaSuccess;
  DrawKernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(probs, vocab, cut_prob, cut_index, kept_mass, seed,
                                                                  positions, rng_stream, token);
  return cudaGetLastError();
}

cudaError_t SamplerArgmax(const float* logits, int64_t rows, int64_t vocab, int32_t* token, cudaStream_t stream) {
  if (!RowsOk(rows, vocab)) return cudaErrorInvalidValue;
  if (rows == 0) return cudaSuccess;
  ArgmaxKernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(logits, vocab, token);
  return cudaGetLastError();
}

cudaError_t PhiloxBatch(const uint32_t* counters, const uint32_t* keys, int64_t n, uint32_t* out,
                        cudaStream_t stream) {
  if (n < 0 || n > 0x7fffffff) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  PhiloxKernel<<<static_cast<unsigned>((n + 255) / 256), 256, 0, stream>>>(counters, keys, n, out);
  return cudaGetLastError();
}

cudaError_t UniformBatch(uint64_t seed, const uint64_t* positions, int64_t n, uint32_t rng_stream, double* out,
                         cudaStream_t stream) {
  if (n < 0 || n > 0x7fffffff) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  UniformKernel<<<static_cast<unsigned>((n + 255) / 256), 256, 0, stream>>>(seed, positions, n, rng_stream, out);
  return cudaGetLastError();
}

}  // namespace mtpspec::cuda::launch
