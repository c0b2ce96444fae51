// Plain launch functions of attention/mla_cuda.cu (shared with nvcc; no absl).
//
// The absorbed-form attention core, shared by the three paths (they differ only in the key list):
//   AbsorbQuery      q_lat[r, h] = (W_UK^h)ᵀ q_nope[r, h]                     [rows, N_h, r_kv]
//   LatentAttention  z[r, h] = softmax_k(scale·(q_lat·c_j + q_rope·k_r_j)) · c_j over row r's
//                    key list, keys that are −1, ≥ T or > position re-masked  [rows, N_h, r_kv]
//   UnabsorbOutput   o[r, h] = W_UV^h z[r, h]                                   [rows, N_h·d_v]
// Every (row, head) is computed the same way whatever the number of rows in the call.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace mtpspec::cuda::launch {

inline constexpr int64_t kAttentionKeysPerSplit = 128;  // keys of the list per partial-softmax block

// kv_b: [N_h·(d_n+d_v), r_kv] bf16; q: [rows, N_h, d_n + d_r] (the nope part is read);
// q_lat: [rows, N_h, r_kv].
cudaError_t AbsorbQuery(const float* q, int64_t rows, int64_t n_heads, int64_t d_n, int64_t d_r, int64_t d_v,
                        int64_t r_kv, const __nv_bfloat16* kv_b, float* q_lat, cudaStream_t stream);

// o: [rows, N_h·d_v]; z: [rows, N_h, r_kv].
cudaError_t UnabsorbOutput(const float* z, int64_t rows, int64_t n_heads, int64_t d_n, int64_t d_v, int64_t r_kv,
                           const __nv_bfloat16* kv_b, float* o, cudaStream_t stream);

struct LatentCacheView {
  const float* latent = nullptr;       // [capacity, r_kv] f32, or null when int8
  const int8_t* latent_i8 = nullptr;   // [capacity, r_kv]
  const float* latent_scale = nullptr; // [capacity]
  const float* rope_key = nullptr;     // [capacity, d_r]
  int64_t r_kv = 0;
  int64_t d_r = 0;
};

struct AttentionQuery {
  const float* q_lat = nullptr;   // [rows, N_h, r_kv]
  const float* q_rope = nullptr;  // row r, head h at q_rope + r·row_stride + h·head_stride, d_r values
  int64_t q_rope_row_stride = 0;
  int64_t q_rope_head_stride = 0;
  int64_t rows = 0;
  int64_t n_heads = 0;
  int64_t first_position = 0;     // row r sits at position first_position + r
  float softmax_scale = 0.0f;
};

// Partial buffers for LatentAttention, in floats: m and l [rows, N_h, splits] each, z [rows, N_h,
// splits, r_kv]; splits = ceil(width / kAttentionKeysPerSplit).
int64_t LatentAttentionScratchFloats(int64_t rows, int64_t n_heads, int64_t width, int64_t r_kv);

// keys: [rows, width] cache slots, or null for the identity list (entry k is key k). num_keys = T.
// z: [rows, N_h, r_kv]; scratch: LatentAttentionScratchFloats floats.
cudaError_t LatentAttention(const AttentionQuery& query, const LatentCacheView& cache, const int32_t* keys,
                            int64_t width, int64_t num_keys, float* scratch, float* z, cudaStream_t stream);

// masked[r, j] = j when j is in row r's selection (selected [rows, width]), else −1. masked: [rows, T].
cudaError_t BuildMaskedKeys(const int32_t* selected, int64_t rows, int64_t width, int64_t num_keys, int32_t* masked,
                            cudaStream_t stream);

}  // namespace mtpspec::cuda::launch
