// Plain launch functions of verify/sampler_cuda.cu (shared with nvcc; no absl). One block per row
// for every per-row kernel. Each returns the launch's cudaError_t.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace mtpspec::cuda::launch {

// probs[r, i] = exp((logit − max_r) / T) / Σ_i exp(...), in double. logits: [rows, V] f32.
cudaError_t SamplerSoftmax(const float* logits, int64_t rows, int64_t vocab, double temperature, double* probs,
                           cudaStream_t stream);

// Device scratch bytes SamplerSortRows needs for rows × vocab.
cudaError_t SamplerSortTempBytes(int64_t rows, int64_t vocab, size_t* bytes);
// Sorts each row of probs descending, ties by index (stable radix sort over ascending indices).
// index_scratch: [rows, V]; offsets: [rows + 1]; sorted_probs: [rows, V]; sorted_index: [rows, V].
cudaError_t SamplerSortRows(const double* probs, int64_t rows, int64_t vocab, void* temp, size_t temp_bytes,
                            int32_t* index_scratch, int32_t* offsets, double* sorted_probs, int32_t* sorted_index,
                            cudaStream_t stream);

struct SamplerFilter {
  int64_t top_k = 0;   // 0 = off
  double top_p = 1.0;  // 1 = off
  double min_p = 0.0;  // 0 = off
};

// From each sorted row, the kept prefix (top-k, then top-p on what top-k kept, then min-p) as its
// last kept entry (cut_prob, cut_index: the entries ≥ it in (prob desc, index asc) order are kept)
// and its total mass kept_mass. All outputs: [rows].
cudaError_t SamplerFilterSorted(const double* sorted_probs, const int32_t* sorted_index, int64_t rows, int64_t vocab,
                                const SamplerFilter& filter, double* cut_prob, int32_t* cut_index, double* kept_mass,
                                cudaStream_t stream);

// Inverse-CDF draw in index order with u = UniformAt(seed, positions[r], rng_stream). With
// cut_prob == nullptr the distribution is probs as is; otherwise probs restricted to the kept
// entries and divided by kept_mass. token: [rows].
cudaError_t SamplerDraw(const double* probs, int64_t rows, int64_t vocab, const double* cut_prob,
                        const int32_t* cut_index, const double* kept_mass, uint64_t seed, const int64_t* positions,
                        uint32_t rng_stream, int32_t* token, cudaStream_t stream);

// argmax of each row, lowest index on ties. token: [rows].
cudaError_t SamplerArgmax(const float* logits, int64_t rows, int64_t vocab, int32_t* token, cudaStream_t stream);

// Philox4x32-10 of n (counter, key) pairs: counters [n, 4], keys [n, 2], out [n, 4].
cudaError_t PhiloxBatch(const uint32_t* counters, const uint32_t* keys, int64_t n, uint32_t* out,
                        cudaStream_t stream);
// out[i] = UniformAt(seed, positions[i], rng_stream), i < n.
cudaError_t UniformBatch(uint64_t seed, const uint64_t* positions, int64_t n, uint32_t rng_stream, double* out,
                         cudaStream_t stream);

}  // namespace mtpspec::cuda::launch
