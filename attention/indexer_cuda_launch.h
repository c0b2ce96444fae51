// Plain launch functions of attention/indexer_cuda.cu (shared with nvcc; no absl).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace mtpspec::cuda::launch {

// scores[r, j] = Σ_h fma(head_weights[r, h]·head_scale, max((q[r, h] · keys[j])·dot_scale, 0), ·)
// for j ≤ first_position + r, −∞ otherwise. q: [rows, n_heads, head_dim]; keys: [num_keys, head_dim].
cudaError_t IndexerScoreKeys(const float* q, const float* head_weights, float head_scale, int64_t rows,
                             int64_t n_heads, int64_t head_dim, int64_t first_position, const float* keys,
                             int64_t num_keys, float* scores, cudaStream_t stream);

// Radix top-k (see indexer_cuda.h, SelectTopKCuda). selected: [rows, width], width = min(k, num_keys).
size_t RadixTopKWorkspaceBytes(int64_t rows, int64_t num_keys);
cudaError_t RadixTopK(const float* scores, int64_t rows, int64_t num_keys, int64_t width, int64_t first_position,
                      void* workspace, int32_t* selected, cudaStream_t stream);

// selected[r, j] = j for j < width, every row.
cudaError_t IotaRows(int64_t rows, int64_t width, int32_t* selected, cudaStream_t stream);

}  // namespace mtpspec::cuda::launch
