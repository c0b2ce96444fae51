// Plain launch functions of attention/kv_cache_cuda.cu (shared with nvcc; no absl).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace mtpspec::cuda::launch {

// Row r of kv [rows, kv_stride]: c = RMSNorm(kv[r, 0:n])·weight, written to latent_f32[slot] or,
// when latent_i8 is non-null, quantised to latent_i8[slot] with scale[slot]; slot = first_slot + r.
cudaError_t NormStoreLatent(const float* kv, int64_t rows, int64_t kv_stride, int64_t n, const float* weight,
                            float eps, float* latent_f32, int8_t* latent_i8, float* scale, int64_t first_slot,
                            cudaStream_t stream);
// out[j, :] = latent_i8[j, :] · scale[j] for j < count. out: [count, n].
cudaError_t DequantiseLatents(const int8_t* latent_i8, const float* scale, int64_t count, int64_t n, float* out,
                              cudaStream_t stream);

}  // namespace mtpspec::cuda::launch
