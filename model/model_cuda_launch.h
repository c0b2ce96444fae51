// Plain launch functions of model/model_cuda.cu (shared with nvcc; no absl).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace mtpspec::cuda::launch {

// out[r, :] = table[tokens[r], :] widened to f32. table: [vocab, hidden] bf16; tokens: device
// [rows] int32; out: [rows, hidden]. A token outside [0, vocab) yields a row of NaN (the host
// validates ids first, so this only makes a bug visible).
cudaError_t EmbedRowsBf16(const __nv_bfloat16* table, int64_t vocab, int64_t hidden, const int32_t* tokens,
                          int64_t rows, float* out, cudaStream_t stream);

}  // namespace mtpspec::cuda::launch
