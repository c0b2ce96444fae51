// Kernels of model/model_cuda: the embedding gather.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "model/model_cuda_launch.h"

namespace mtpspec::cuda::launch {
namespace {

constexpr int kThreads = 256;

// One block per row; threads stride over the hidden dimension.
__global__ void EmbedRowsKernel(const __nv_bfloat16* __restrict__ table, int64_t vocab, int64_t hidden,
                                const int32_t* __restrict__ tokens, float* __restrict__ out) {
  const int64_t r = blockIdx.x;
  const int32_t token = tokens[r];
  float* dst = out + r * hidden;  // [hidden]
  if (token < 0 || token >= vocab) {
    for (int64_t j = threadIdx.x; j < hidden; j += kThreads) dst[j] = __int_as_float(0x7fc00000);  // NaN
    return;
  }
  const __nv_bfloat16* src = table + static_cast<int64_t>(token) * hidden;  // [hidden]
  for (int64_t j = threadIdx.x; j < hidden; j += kThreads) dst[j] = __bfloat162float(src[j]);
}

}  // namespace

cudaError_t EmbedRowsBf16(const __nv_bfloat16* table, int64_t vocab, int64_t hidden, const int32_t* tokens,
                          int64_t rows, float* out, cudaStream_t stream) {
  if (rows <= 0 || hidden <= 0) return cudaSuccess;
  if (rows > 0x7fffffff) return cudaErrorInvalidValue;
  EmbedRowsKernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(table, vocab, hidden, tokens, out);
  return cudaGetLastError();
}

}  // namespace mtpspec::cuda::launch
